#!/usr/bin/env python3
"""Golden token ids from llama.cpp for the stride-tokenizer tests.

Tokenizes a few hundred varied strings (unicode with CJK, emoji and combining marks, digits and
long numbers, code, whitespace runs, tabs and newlines, leading spaces, contractions, special
tokens inside text, the empty string) with llama.cpp's tokenizer for a GGUF file, as
`Llama.tokenize(text.encode(), add_bos=False, special=True)` (special tokens written in the
text are parsed, as `Tokenizer::encode(text, false)` does), and writes them as JSON:
`{"model": ..., "llama_cpp_python": ..., "cases": [{"text": ..., "ids": [...]}, ...]}`.

Install (builds llama.cpp from source; ~15+ minutes on 2 cores) and run:

    python3 -m venv ~/.venvs/llama-cpp
    nice -n 19 ~/.venvs/llama-cpp/bin/pip install llama-cpp-python
    ~/.venvs/llama-cpp/bin/python scripts/tokenizer_golden.py \
        [--model ~/.cache/stride/models/SmolLM2-135M-Instruct.Q4_1.gguf] \
        [--out crates/stride-tokenizer/tests/fixtures/smollm2_llama_cpp.json]

While llama-cpp-python is still building, the same ids come from its freshly built libllama.so
directly: `scripts/tokenizer_golden_libllama.cpp` reads the strings hex-encoded one per line
(`python3 -c "import sys; sys.path.insert(0, 'scripts'); import tokenizer_golden as g;
print(''.join(c.encode().hex() + chr(10) for c in g.cases()), end='')"`) and prints
`llama_tokenize(vocab, text, add_special=false, parse_special=true)` per line, the call that
`Llama.tokenize(..., add_bos=False, special=True)` makes; the committed fixture was made so.

The strings are generated deterministically (a fixed seed), so rerunning gives the same file.
"""

import argparse
import json
import os
import random


def cases():
    fixed = [
        "",
        " ",
        "  ",
        "   ",
        "\t",
        "\n",
        "\n\n",
        "\r\n",
        " \n \n",
        "Hello world",
        " Hello world",
        "  Hello world",
        "Hello  world",
        "Hello world ",
        "Hello world  ",
        "hello\tworld",
        "hello\n\nworld\n",
        "The quick brown fox jumps over the lazy dog.",
        "THE QUICK BROWN FOX",
        "I'm sure you're right, they'll see; we've done it, he'd say, it's John's.",
        "I'M SURE YOU'RE RIGHT",
        "don't Don't DON'T",
        "'s 't 're 've 'm 'll 'd",
        "rock'n'roll",
        "0",
        "7",
        "42",
        "123",
        "1234",
        "12345678901234567890",
        "3.14159265358979",
        "1,000,000",
        "-17e-3",
        "0x1F 0b1010 1e10",
        "2024-06-01T12:34:56Z",
        "Call 555-0100 or +1 (202) 555-0199",
        "version 1.2.3-rc4",
        "١٢٣ ٤٥٦",  # Arabic-Indic digits
        "½ ¾ ² ³ Ⅻ",  # number-like characters (No, Nl)
        "def f(x):\n    return x * 2\n",
        "fn main() {\n\tprintln!(\"{}\", 1 + 2);\n}\n",
        "for (int i = 0; i < n; ++i) { a[i] += b[i]; }",
        "<div class=\"a\">&amp; &lt;tag&gt;</div>",
        "SELECT * FROM t WHERE x >= 10 AND y <> 'z';",
        "x = [1, 2, 3]  # comment",
        "if a==b&&c!=d||e<=f: pass",
        "    indented four\n        indented eight",
        "\t\ttabs\t\tinside\t",
        "trailing spaces   \n   leading spaces",
        "a\u00a0b",  # no-break space
        "a\u2003b\u3000c",  # em space, ideographic space
        "a\u200bb",  # zero-width space (not whitespace)
        "日本語のテキスト",
        "我爱自然语言处理。",
        "한국어 텍스트입니다",
        "Привет, мир!",
        "Ελληνικά γράμματα",
        "مرحبا بالعالم",
        "שלום עולם",
        "हिन्दी भाषा",
        "ภาษาไทย",
        "Tiếng Việt có dấu",
        "e\u0301 cafe\u0301 nai\u0308ve",  # combining marks
        "café naïve résumé",
        "Z\u0351\u0360\u0318a\u0308\u0304l\u0313g\u0300o",  # zalgo
        "👍",
        "👍🏽",
        "👨‍👩‍👧‍👦 family",
        "🇫🇷🇯🇵 flags",
        "I ❤️ Rust 🦀!",
        "emoji 😀😃😄😁 run",
        "math: ∑ ∫ √ ∞ ≠ ≤ ≥ ∂",
        "€100 £50 ¥1000 ₹20",
        "«quotes» “curly” ‘single’ „low“",
        "dash – em — ellipsis …",
        "\x00\x01\x1f control chars \x7f",
        "\U0001F600\U0010FFFF\uFFFD",
        "<|im_start|>",
        "<|im_end|>",
        "<|endoftext|>",
        "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
        "text<|im_end|>more",
        "<|im_start|><|im_end|>",
        "<|im_start|> user",
        " <|im_start|>",
        "<|im_start",
        "<|im_start|im_end|>",
        "<|endoftext|><|endoftext|>",
        "<repo_name>x<file_sep>y<filename>z",
        "<jupyter_start><jupyter_code>print(1)<jupyter_output>1",
        "a<|im_start|>b<|im_end|>c<|endoftext|>d",
        "!!!???...,,,;;;",
        "'''",
        "\"\"\"docstring\"\"\"",
        "a" * 100,
        " " * 50,
        "\n" * 20,
        "ab " * 40,
        "🙂" * 20,
        "x" + " " * 7 + "y",
        "-" * 64,
        "=" * 30 + "\n" + "=" * 30,
        "https://example.com/path?q=1&r=two#frag",
        "user@example.com",
        "C:\\Users\\name\\file.txt",
        "snake_case camelCase PascalCase kebab-case SCREAMING_CASE",
        "The year 1999 and 2000 and 20000.",
        "He said: \"it's 5 o'clock\".",
        "Mixed 中文 and English 123 😀",
    ]
    rng = random.Random(25)
    alphabet = (
        list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        + list("0123456789")
        + list(" \t\n\r  ")
        + list(".,;:!?'\"()[]{}<>/\\|@#$%^&*-_=+~`")
        + list("éèüßøñçÅ")
        + list("日本中文字한국")
        + ["\u0301", "\u0308", "\u200d", "\u00a0", "\u3000"]
        + ["😀", "👍", "🦀", "❤", "\ufe0f"]
        + list("٣½Ⅻ")
        + ["'s", "'t", "'re", "'ll", "'ve", "'d", "'m"]
        + ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
        + [" the", " of", " and", "ing", "tion", "    ", "\n\n"]
    )
    random_cases = []
    for i in range(300):
        n = rng.randint(1, 40 if i < 250 else 200)
        random_cases.append("".join(rng.choice(alphabet) for _ in range(n)))
    return fixed + random_cases


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_dir = os.environ.get("STRIDE_MODELS") or os.path.expanduser("~/.cache/stride/models")
    ap.add_argument("--model", default=os.path.join(default_dir, "SmolLM2-135M-Instruct.Q4_1.gguf"))
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument(
        "--out",
        default=os.path.join(here, "..", "crates", "stride-tokenizer", "tests", "fixtures", "smollm2_llama_cpp.json"),
    )
    args = ap.parse_args()

    import llama_cpp
    from llama_cpp import Llama

    llm = Llama(model_path=args.model, vocab_only=True, verbose=False)
    out = []
    for text in cases():
        ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)
        out.append({"text": text, "ids": [int(i) for i in ids]})
    doc = {
        "model": os.path.basename(args.model),
        "llama_cpp_python": llama_cpp.__version__,
        "call": "Llama(model_path, vocab_only=True).tokenize(text.encode(), add_bos=False, special=True)",
        "cases": out,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"wrote {len(out)} cases to {args.out}")


if __name__ == "__main__":
    main()
