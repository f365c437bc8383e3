//! `stride bench` (being written).

#[derive(clap::Args)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> Result<(), String> {
    Err("stride bench is not built yet".into())
}
