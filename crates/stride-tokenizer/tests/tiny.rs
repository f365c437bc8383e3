//! Tests on a tiny hand-built byte-level vocabulary: no model file needed.

use proptest::prelude::*;
use stride_tokenizer::{BpeSpec, ChatMessage, ChatTemplate, TokenType, Tokenizer, TokenizerError};

/// GPT-2's byte alphabet, written out independently of the crate's table.
fn byte_chars() -> Vec<char> {
    let mut printable: Vec<u32> = (b'!' as u32..=b'~' as u32).collect();
    printable.extend(0xA1..=0xAC);
    printable.extend(0xAE..=0xFF);
    let mut n = 0;
    (0..256u32)
        .map(|b| {
            if printable.contains(&b) {
                char::from_u32(b).unwrap()
            } else {
                n += 1;
                char::from_u32(0x100 + n - 1).unwrap()
            }
        })
        .collect()
}

/// ids 0..=2: specials; 3..259: the 256 bytes; then merged tokens.
fn tiny(pre: &str) -> Tokenizer {
    let mut tokens = vec![
        "<|endoftext|>".to_string(),
        "<|im_start|>".to_string(),
        "<|im_end|>".to_string(),
    ];
    let mut types = vec![TokenType::Control; 3];
    for c in byte_chars() {
        tokens.push(c.to_string());
        types.push(TokenType::Normal);
    }
    let merges = [
        "h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o", "Ġwo r", "Ġwor l", "Ġworl d", "1 2",
    ];
    for m in merges {
        tokens.push(m.replace(' ', ""));
        types.push(TokenType::Normal);
    }
    Tokenizer::from_spec(BpeSpec {
        tokens,
        token_types: types,
        merges: merges.iter().map(|s| s.to_string()).collect(),
        pre: pre.to_string(),
        bos: Some(1),
        eos: Some(2),
        pad: None,
        unk: Some(0),
        add_bos: true,
        add_eos: false,
        chat_template: None,
    })
    .unwrap()
}

fn id(t: &Tokenizer, s: &str) -> u32 {
    t.token_to_id(s).unwrap()
}

#[test]
fn bpe_merges_in_rank_order() {
    let t = tiny("smollm");
    let ids = t.encode("hello world", false).unwrap();
    assert_eq!(ids, vec![id(&t, "hello"), id(&t, "Ġworld")]);
    assert_eq!(t.decode(&ids).unwrap(), "hello world");
    // BOS when asked
    let ids = t.encode("hello", true).unwrap();
    assert_eq!(ids, vec![1, id(&t, "hello")]);
}

#[test]
fn digits_are_split_one_by_one_for_smollm_only() {
    let s = tiny("smollm");
    assert_eq!(
        s.encode("12", false).unwrap(),
        vec![id(&s, "1"), id(&s, "2")]
    );
    let g = tiny("gpt-2");
    assert_eq!(g.encode("12", false).unwrap(), vec![id(&g, "12")]);
}

#[test]
fn special_tokens_are_matched_in_text() {
    let t = tiny("smollm");
    let ids = t.encode("<|im_start|>hello<|im_end|>", false).unwrap();
    assert_eq!(ids, vec![1, id(&t, "hello"), 2]);
    // spelled out by encode_plain
    let plain = t.encode_plain("<|im_start|>", false).unwrap();
    assert!(plain.len() > 1 && !plain.contains(&1));
    assert_eq!(t.decode(&plain).unwrap(), "<|im_start|>");
    assert_eq!(t.decode(&ids).unwrap(), "<|im_start|>hello<|im_end|>");
    assert_eq!(t.decode_skip_special(&ids).unwrap(), "hello");
}

#[test]
fn errors_are_values() {
    let t = tiny("smollm");
    assert!(matches!(
        t.decode(&[999_999]),
        Err(TokenizerError::IdOutOfRange { id: 999_999, .. })
    ));
    assert!(t.token_to_piece(u32::MAX).is_err());
    // one byte of a two-byte character
    let e_acute = "é".as_bytes();
    let first = id(&t, &byte_chars()[e_acute[0] as usize].to_string());
    assert!(matches!(
        t.decode(&[first]),
        Err(TokenizerError::InvalidUtf8 { .. })
    ));
    assert_eq!(t.decode_lossy(&[first], false).unwrap(), "\u{fffd}");
    let err = Tokenizer::from_spec(BpeSpec {
        tokens: vec!["a".into()],
        token_types: vec![TokenType::Normal],
        merges: vec![],
        pre: "llama-bpe".into(),
        bos: None,
        eos: None,
        pad: None,
        unk: None,
        add_bos: false,
        add_eos: false,
        chat_template: None,
    })
    .unwrap_err();
    assert!(err.to_string().contains("llama-bpe"), "{err}");
    let err = Tokenizer::from_spec(BpeSpec {
        tokens: vec!["a".into(), "b".into()],
        token_types: vec![TokenType::Normal; 2],
        merges: vec!["a b".into()],
        pre: "gpt-2".into(),
        bos: None,
        eos: None,
        pad: None,
        unk: None,
        add_bos: false,
        add_eos: false,
        chat_template: None,
    })
    .unwrap_err();
    assert!(err.to_string().contains("\"ab\""), "{err}");
}

#[test]
fn stream_decoder_yields_whole_characters() {
    let t = tiny("smollm");
    let text = "hé 👍 world";
    let ids = t.encode(text, false).unwrap();
    let mut dec = t.stream_decoder(false);
    let mut out = String::new();
    let mut held_back = false;
    for &i in &ids {
        let s = dec.push(i).unwrap();
        held_back |= s.is_empty();
        out.push_str(&s);
    }
    dec.finish().unwrap();
    assert!(held_back);
    assert_eq!(out, text);
    // an incomplete character at the end is an error
    let mut dec = t.stream_decoder(false);
    assert_eq!(dec.push(ids[1]).unwrap(), "");
    assert!(dec.finish().is_err());
    // a stray continuation byte is an error, and the decoder goes on
    let cont = id(&t, &byte_chars()[0x80].to_string());
    let mut dec = t.stream_decoder(false);
    assert!(dec.push(cont).is_err());
    assert_eq!(dec.push(id(&t, "hello")).unwrap(), "hello");
}

const SMOLLM2_TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

#[test]
fn chatml_template_renders() {
    let t = ChatTemplate::parse(SMOLLM2_TEMPLATE).unwrap();
    let msgs = [ChatMessage::new("user", "Hi!")];
    assert_eq!(
        t.render(&msgs, true),
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
    );
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi!"),
        ChatMessage::new("assistant", "Hello."),
    ];
    assert_eq!(
        t.render(&msgs, false),
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n"
    );
    assert_eq!(
        ChatTemplate::chatml().render(&[ChatMessage::new("user", "x")], true),
        "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn unknown_templates_are_refused_clearly() {
    for (src, what) in [
        ("{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}", "bos_token"),
        ("{% for message in messages %}{{ message['content'] | trim }}{% endfor %}", "trim"),
        ("{% for message in messages %}{% if message['role'] == 'user' %}{{ raise_exception('x') }}{% endif %}{% endfor %}", "raise_exception"),
        ("{%- for message in messages -%}{{ message['content'] }}{%- endfor -%}", "whitespace control"),
        ("{% set x = 1 %}", "set"),
        ("{% for message in messages %}", "endfor"),
        ("just text", "never loops"),
    ] {
        let err = ChatTemplate::parse(src).unwrap_err();
        assert!(err.to_string().contains(what), "{src}: {err}");
    }
    let t = tiny("smollm");
    assert!(matches!(
        t.apply_chat_template(&[], true),
        Err(TokenizerError::NoChatTemplate)
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn round_trip_any_utf8(s in any::<String>()) {
        let t = tiny("smollm");
        let ids = t.encode(&s, false).unwrap();
        prop_assert_eq!(t.decode(&ids).unwrap(), s.clone());
        let ids = t.encode_plain(&s, false).unwrap();
        prop_assert_eq!(t.decode(&ids).unwrap(), s);
    }

    #[test]
    fn stream_equals_decode(s in "[a-zé👍 \\n0-9]{0,30}") {
        let t = tiny("smollm");
        let ids = t.encode(&s, false).unwrap();
        let mut dec = t.stream_decoder(false);
        let mut out = String::new();
        for &i in &ids { out.push_str(&dec.push(i).unwrap()); }
        dec.finish().unwrap();
        prop_assert_eq!(out, s);
    }
}
