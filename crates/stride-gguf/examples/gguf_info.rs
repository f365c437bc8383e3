//! Prints a GGUF file's metadata and tensor table, like llama.cpp's `gguf-dump`.
//!
//! ```sh
//! cargo run -p stride-gguf --example gguf_info -- model.gguf
//! ```

use std::collections::BTreeMap;
use stride_gguf::Gguf;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: gguf_info FILE.gguf");
        std::process::exit(2);
    };
    let g = match Gguf::open(&path) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "{path}: GGUF v{}, {} metadata entries, {} tensors, alignment {}, data at byte {}",
        g.version(),
        g.metadata().len(),
        g.tensors().len(),
        g.alignment(),
        g.data_offset()
    );
    println!("\n* metadata");
    for (i, (k, v)) in g.metadata().enumerate() {
        let ty = v.type_description();
        let shown = v.to_string();
        let shown = if shown.chars().count() > 100 {
            format!("{}…", shown.chars().take(100).collect::<String>())
        } else {
            shown
        };
        println!("{:5}: {:<18} {:<45} = {}", i + 1, ty, k, shown);
    }
    println!("\n* tensors");
    let mut by_type: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for (i, t) in g.tensors().iter().enumerate() {
        let dims: Vec<String> = t.dims.iter().map(|d| d.to_string()).collect();
        println!(
            "{:5}: {:>10} | {:<20} | {:<6} | offset {:>10} | {}",
            i + 1,
            t.n_elements(),
            dims.join(" x "),
            t.ggml_type.name(),
            t.offset,
            t.name
        );
        let e = by_type.entry(t.ggml_type.name()).or_default();
        e.0 += 1;
        e.1 += t.n_bytes();
    }
    println!("\n* by type");
    for (ty, (n, bytes)) in by_type {
        println!("{ty:>8}: {n:4} tensors, {bytes:>12} bytes");
    }
}
