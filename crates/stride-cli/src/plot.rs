//! The loss-curve image of `stride train sae`: a PNG drawn with `plotters`' bitmap backend.
//!
//! plotters is built without its default features, so no system font library (fontconfig,
//! freetype) is needed: text goes through `ab_glyph`, with a TrueType font read at run time
//! from `$STRIDE_PLOT_FONT` or a few usual system locations. Where none is found (or
//! `STRIDE_PLOT_FONT` is set but empty) the curve is drawn without text (frame, curve, plateau
//! line), never an error.

use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;
use std::sync::OnceLock;

const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Registers a font for `sans-serif` once; whether one was found.
fn have_font() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let env = std::env::var("STRIDE_PLOT_FONT").ok();
        if env.as_deref() == Some("") {
            return false; // explicitly no text
        }
        let paths = env
            .iter()
            .map(String::as_str)
            .chain(FONT_CANDIDATES.iter().copied());
        for p in paths {
            if let Ok(bytes) = std::fs::read(p) {
                // plotters keeps fonts for the life of the process
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                if register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                    return true;
                }
            }
        }
        false
    })
}

/// The curve is a PNG: its path must end in `.png`.
pub fn check_path(path: &Path) -> Result<(), String> {
    let ext_ok = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if ext_ok {
        Ok(())
    } else {
        Err(format!(
            "--plot {}: the loss curve is written as PNG; give a path ending in .png (or --no-plot)",
            path.display()
        ))
    }
}

/// Writes the training loss per step (log scale) and the plateau (the loss of predicting the
/// mean sample) as a PNG at `path`.
pub fn loss_curve(path: &Path, losses: &[f64], plateau: f64) -> Result<(), String> {
    check_path(path)?;
    if losses.is_empty() {
        return Err("no steps were taken".into());
    }
    let text = have_font();
    let e = |e: &dyn std::fmt::Display| e.to_string();

    let good = |v: f64| v.is_finite() && v > 0.0;
    let vals = losses.iter().copied().chain([plateau]).filter(|&v| good(v));
    let (lo, hi) = vals.fold((f64::INFINITY, 0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo.is_finite() && hi > 0.0 {
        (lo / 1.5, hi * 1.5)
    } else {
        (1e-6, 1.0)
    };
    let n = losses.len() as u64;

    let root = BitMapBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    if text {
        builder
            .caption("stride train sae: training loss (MSE)", ("sans-serif", 24))
            .x_label_area_size(45)
            .y_label_area_size(80);
    }
    let mut chart = builder
        .build_cartesian_2d(0..n.max(1), (lo..hi).log_scale())
        .map_err(|x| e(&x))?;
    if text {
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc("loss")
            .y_label_formatter(&|v| format!("{v:.0e}"))
            .label_style(("sans-serif", 15))
            .draw()
            .map_err(|x| e(&x))?;
    } else {
        let (w, h) = root.dim_in_pixel();
        root.draw(&Rectangle::new(
            [(19, 19), (w as i32 - 20, h as i32 - 20)],
            BLACK.stroke_width(1),
        ))
        .map_err(|x| e(&x))?;
    }
    let clamp = |v: f64| if good(v) { v } else { lo };
    let curve = chart
        .draw_series(LineSeries::new(
            losses
                .iter()
                .enumerate()
                .map(|(i, &v)| (i as u64, clamp(v))),
            BLUE.stroke_width(2),
        ))
        .map_err(|x| e(&x))?;
    if text {
        curve
            .label("training loss")
            .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLUE.stroke_width(2)));
    }
    if good(plateau) {
        let line = chart
            .draw_series(LineSeries::new(
                [(0, plateau), (n.max(1), plateau)],
                RED.stroke_width(1),
            ))
            .map_err(|x| e(&x))?;
        if text {
            line.label("plateau: predicting the mean sample")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], RED.stroke_width(1)));
        }
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 15))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
    }
    root.present().map_err(|x| e(&x))?;
    Ok(())
}
