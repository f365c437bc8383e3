//! `stride check` (being written).

#[derive(clap::Args)]
pub struct CheckArgs {}

pub fn run(_a: CheckArgs) -> Result<(), String> {
    Err("stride check is not built yet".into())
}
