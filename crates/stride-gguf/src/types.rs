//! `GgmlType`: the tensor element/block types a GGUF file can name, with their block geometry.

use std::fmt;

/// The storage type of a GGUF tensor (ggml's `ggml_type`), with its numeric id in the file.
///
/// Block-quantized types store `block_size()` consecutive elements of a row in
/// `type_size()` bytes; plain types have a block size of 1. The geometry of every type is
/// the reference's (`GGML_QUANT_SIZES` in the `gguf` Python package), checked by a test.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    MXFP4,
    NVFP4,
    Q1_0,
}

/// Super-block size of the K-quants.
pub const QK_K: usize = 256;

impl GgmlType {
    /// Every type this crate knows, in id order.
    pub const ALL: [GgmlType; 34] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::IQ2_XXS,
        GgmlType::IQ2_XS,
        GgmlType::IQ3_XXS,
        GgmlType::IQ1_S,
        GgmlType::IQ4_NL,
        GgmlType::IQ3_S,
        GgmlType::IQ2_S,
        GgmlType::IQ4_XS,
        GgmlType::I8,
        GgmlType::I16,
        GgmlType::I32,
        GgmlType::I64,
        GgmlType::F64,
        GgmlType::IQ1_M,
        GgmlType::BF16,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::MXFP4,
        GgmlType::NVFP4,
        GgmlType::Q1_0,
    ];

    /// The type with file id `id`, or `None` for an id this crate does not know (ids 4, 5,
    /// 31–33 and 36–38 were removed from ggml; newer ids may appear).
    ///
    /// ```
    /// use stride_gguf::GgmlType;
    /// assert_eq!(GgmlType::from_id(3), Some(GgmlType::Q4_1));
    /// assert_eq!(GgmlType::from_id(4), None);
    /// ```
    pub fn from_id(id: u32) -> Option<GgmlType> {
        GgmlType::ALL.iter().copied().find(|t| t.id() == id)
    }

    /// The numeric id stored in a GGUF file.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2_K => 10,
            Q3_K => 11,
            Q4_K => 12,
            Q5_K => 13,
            Q6_K => 14,
            Q8_K => 15,
            IQ2_XXS => 16,
            IQ2_XS => 17,
            IQ3_XXS => 18,
            IQ1_S => 19,
            IQ4_NL => 20,
            IQ3_S => 21,
            IQ2_S => 22,
            IQ4_XS => 23,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            IQ1_M => 29,
            BF16 => 30,
            TQ1_0 => 34,
            TQ2_0 => 35,
            MXFP4 => 39,
            NVFP4 => 40,
            Q1_0 => 41,
        }
    }

    /// The name ggml and `gguf-dump` use (`"Q4_K"`, `"F32"`, …).
    pub fn name(self) -> &'static str {
        use GgmlType::*;
        match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2_K => "Q2_K",
            Q3_K => "Q3_K",
            Q4_K => "Q4_K",
            Q5_K => "Q5_K",
            Q6_K => "Q6_K",
            Q8_K => "Q8_K",
            IQ2_XXS => "IQ2_XXS",
            IQ2_XS => "IQ2_XS",
            IQ3_XXS => "IQ3_XXS",
            IQ1_S => "IQ1_S",
            IQ4_NL => "IQ4_NL",
            IQ3_S => "IQ3_S",
            IQ2_S => "IQ2_S",
            IQ4_XS => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            IQ1_M => "IQ1_M",
            BF16 => "BF16",
            TQ1_0 => "TQ1_0",
            TQ2_0 => "TQ2_0",
            MXFP4 => "MXFP4",
            NVFP4 => "NVFP4",
            Q1_0 => "Q1_0",
        }
    }

    /// Elements per block (1 for plain types, 32 for Q4_0 … Q8_1 and MXFP4, 256 for the
    /// K-quants).
    pub fn block_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 | F16 | BF16 | F64 | I8 | I16 | I32 | I64 => 1,
            Q4_0 | Q4_1 | Q5_0 | Q5_1 | Q8_0 | Q8_1 | IQ4_NL | MXFP4 => 32,
            Q2_K | Q3_K | Q4_K | Q5_K | Q6_K | Q8_K | IQ2_XXS | IQ2_XS | IQ3_XXS | IQ1_S
            | IQ3_S | IQ2_S | IQ4_XS | IQ1_M | TQ1_0 | TQ2_0 => QK_K,
            NVFP4 => 64,
            Q1_0 => 128,
        }
    }

    /// Bytes per block.
    ///
    /// ```
    /// use stride_gguf::GgmlType;
    /// assert_eq!((GgmlType::Q4_K.block_size(), GgmlType::Q4_K.type_size()), (256, 144));
    /// ```
    pub fn type_size(self) -> usize {
        use GgmlType::*;
        match self {
            F32 => 4,
            F16 | BF16 => 2,
            F64 => 8,
            I8 => 1,
            I16 => 2,
            I32 => 4,
            I64 => 8,
            Q4_0 => 2 + 16,
            Q4_1 => 2 + 2 + 16,
            Q5_0 => 2 + 4 + 16,
            Q5_1 => 2 + 2 + 4 + 16,
            Q8_0 => 2 + 32,
            Q8_1 => 4 + 4 + 32,
            Q2_K => 2 + 2 + QK_K / 16 + QK_K / 4,
            Q3_K => 2 + QK_K / 4 + QK_K / 8 + 12,
            Q4_K => 2 + 2 + QK_K / 2 + 12,
            Q5_K => 2 + 2 + QK_K / 2 + QK_K / 8 + 12,
            Q6_K => 2 + QK_K / 2 + QK_K / 4 + QK_K / 16,
            Q8_K => 4 + QK_K + QK_K / 8,
            IQ2_XXS => 2 + QK_K / 4,
            IQ2_XS => 2 + QK_K / 4 + QK_K / 32,
            IQ3_XXS => 2 + QK_K / 4 + QK_K / 8,
            IQ1_S => 2 + QK_K / 8 + QK_K / 16,
            IQ4_NL => 2 + 16,
            IQ3_S => 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4,
            IQ2_S => 2 + QK_K / 4 + QK_K / 16,
            IQ4_XS => 2 + 2 + QK_K / 2 + QK_K / 64,
            IQ1_M => QK_K / 8 + QK_K / 16 + QK_K / 32,
            TQ1_0 => 2 + 4 * 13,
            TQ2_0 => 2 + 64,
            MXFP4 => 1 + 16,
            NVFP4 => 4 + 32,
            Q1_0 => 2 + 16,
        }
    }

    /// Whether elements are stored in blocks with shared scales (block size > 1).
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by `n_elements` elements, or `None` when `n_elements` is not a whole
    /// number of blocks or the size overflows.
    ///
    /// ```
    /// use stride_gguf::GgmlType;
    /// assert_eq!(GgmlType::Q8_0.bytes_for(64), Some(68));
    /// assert_eq!(GgmlType::Q8_0.bytes_for(33), None);
    /// ```
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bs = self.block_size() as u64;
        if !n_elements.is_multiple_of(bs) {
            return None;
        }
        (n_elements / bs).checked_mul(self.type_size() as u64)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
