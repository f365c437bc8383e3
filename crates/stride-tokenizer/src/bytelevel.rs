//! GPT-2's byte-level alphabet: every byte is shown as one printable character, so that BPE
//! vocabularies are strings. Printable Latin-1 bytes (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) stand
//! for themselves; the other 68 bytes take the characters U+0100, U+0101, … in byte order
//! (so the space 0x20 is `Ġ` U+0120, the newline 0x0A is `Ċ` U+010A).

fn is_self_printing(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The character that stands for each byte.
#[cfg(test)]
pub(crate) fn byte_to_char_table() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 0x100u32;
    for b in 0..=255u8 {
        table[b as usize] = if is_self_printing(b) {
            b as char
        } else {
            let c = char::from_u32(next).expect("U+0100..U+0143 are chars");
            next += 1;
            c
        };
    }
    table
}

/// The byte a character stands for, or `None` for a character outside the alphabet.
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let u = c as u32;
    if u < 256 && is_self_printing(u as u8) {
        return Some(u as u8);
    }
    if !(0x100..0x100 + 68).contains(&u) {
        return None;
    }
    // the (u - 0x100)-th byte that does not print itself
    let k = u - 0x100;
    (0..=255u8)
        .filter(|&b| !is_self_printing(b))
        .nth(k as usize)
}

/// The bytes a byte-level token string stands for, or the first character outside the
/// alphabet.
pub(crate) fn decode_token(text: &str) -> std::result::Result<Vec<u8>, char> {
    text.chars().map(|c| char_to_byte(c).ok_or(c)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alphabet_is_a_bijection() {
        let t = byte_to_char_table();
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(t[b as usize]), Some(b));
        }
        assert_eq!(t[b' ' as usize], 'Ġ');
        assert_eq!(t[b'\n' as usize], 'Ċ');
        assert_eq!(char_to_byte('€'), None);
    }
}
