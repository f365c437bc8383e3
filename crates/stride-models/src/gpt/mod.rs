//! GPT language models trained from scratch on real text: [`Gpt`] (modern or GPT-2 style,
//! dense or a mixture of experts, see [`GptConfig`] and [`MoeConfig`]), the Shakespeare text split by work ([`split_by_work`]) and drawn in
//! random windows ([`TokenStream`]), and the training loop behind `stride train gpt`
//! ([`GptTrainer`]).

mod config;
mod data;
mod model;
mod moe;
mod train;

pub use config::{GptConfig, Mlp, MoeConfig, Norm, Positions};
pub use data::{encode_works, split_by_work, TokenStream, TokenizerKind, VALIDATION_WORKS};
pub use model::Gpt;
pub use train::{sample_window, Corpus, GptStep, GptTrainConfig, GptTrainer, FORMAT};
