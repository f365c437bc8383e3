//! Token-by-token decoding that yields text only at UTF-8 character boundaries.

use crate::{Result, Tokenizer, TokenizerError};

/// Decodes tokens one at a time, as they are generated. A token may end in the middle of a
/// character (an emoji is often two or three byte tokens): its bytes are held back until the
/// character is complete, so every returned `String` is whole text and the concatenation of
/// everything returned equals [`Tokenizer::decode`] of all the ids.
///
/// Bytes that can never become a character (a stray continuation byte) are an error, as is
/// [`StreamDecoder::finish`] with a character still incomplete; the decoder stays usable
/// after an error (the offending bytes are dropped).
///
/// ```no_run
/// # fn main() -> stride_tokenizer::Result<()> {
/// # let tok = stride_tokenizer::Tokenizer::from_gguf_file("m.gguf")?;
/// let mut dec = tok.stream_decoder(true);
/// for id in tok.encode("naïve 👍", false)? {
///     print!("{}", dec.push(id)?);
/// }
/// dec.finish()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    skip_special: bool,
    pending: Vec<u8>,
}

impl<'a> StreamDecoder<'a> {
    pub(crate) fn new(tok: &'a Tokenizer, skip_special: bool) -> Self {
        StreamDecoder {
            tok,
            skip_special,
            pending: Vec::new(),
        }
    }

    /// Adds one token; returns the text completed by it (often empty in the middle of a
    /// multi-byte character).
    pub fn push(&mut self, id: u32) -> Result<String> {
        if self.skip_special && self.tok.is_control(id) {
            return Ok(String::new());
        }
        let piece = self.tok.token_to_piece(id)?;
        self.pending.extend_from_slice(piece);
        match std::str::from_utf8(&self.pending) {
            Ok(s) => {
                let out = s.to_string();
                self.pending.clear();
                Ok(out)
            }
            Err(e) => {
                let valid = e.valid_up_to();
                if let Some(bad) = e.error_len() {
                    let bytes = self.pending[valid..valid + bad].to_vec();
                    self.pending.clear();
                    return Err(TokenizerError::InvalidUtf8 {
                        detail: format!(
                            "token {id} completes bytes {bytes:02x?}, which are not a UTF-8 character"
                        ),
                    });
                }
                let out = String::from_utf8(self.pending[..valid].to_vec())
                    .expect("valid_up_to marks a valid prefix");
                self.pending.drain(..valid);
                Ok(out)
            }
        }
    }

    /// The bytes held back, waiting for the rest of a character.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Ends the stream: an error if a character was left incomplete.
    pub fn finish(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            Ok(())
        } else {
            let bytes = std::mem::take(&mut self.pending);
            Err(TokenizerError::InvalidUtf8 {
                detail: format!("the stream ended inside a character: bytes {bytes:02x?}"),
            })
        }
    }
}
