//! Writes a copy of a GGUF file whose quantized tensors are dequantized to F32 (metadata,
//! names and dims unchanged; `general.file_type` set to 0, all F32).
//!
//! Used to separate a model's quantization from an engine's arithmetic: llama.cpp on the F32
//! copy computes with f32 activations, as stride does on the dequantized weights, while on
//! the quantized file it rounds activations to 8 bits inside its dot products.
//!
//! ```text
//! cargo run --release -p stride-gguf --example gguf_dequantize -- IN.gguf OUT.gguf
//! ```

use stride_gguf::{GgmlType, Gguf, GgufWriter, Value};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: gguf_dequantize IN.gguf OUT.gguf");
        std::process::exit(2);
    }
    if let Err(e) = run(&args[1], &args[2]) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(input: &str, output: &str) -> Result<(), Box<dyn std::error::Error>> {
    let g = Gguf::open(input)?;
    let mut w = GgufWriter::new();
    w.alignment(g.alignment() as u32)?;
    for (k, v) in g.metadata() {
        if k == "general.alignment" {
            continue;
        }
        let v = if k == "general.file_type" {
            Value::U32(0)
        } else {
            v.clone()
        };
        w.add(k, v);
    }
    for t in g.tensors() {
        let data: Vec<u8> = g
            .dequantize(&t.name)?
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        w.add_tensor(&t.name, &t.dims, GgmlType::F32, &data)?;
    }
    w.write(output)?;
    println!("{input} -> {output}: {} tensors as F32", g.tensors().len());
    Ok(())
}
