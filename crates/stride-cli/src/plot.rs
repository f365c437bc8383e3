//! The loss-curve image of `stride train sae`: a PNG drawn with `plotters`' bitmap backend.
//!
//! plotters is built without its default features, so no system font library (fontconfig,
//! freetype) is needed: text goes through `ab_glyph`, with a TrueType font read at run time
//! from `$STRIDE_PLOT_FONT` or a few usual system locations. Where none is found (or
//! `STRIDE_PLOT_FONT` is set but empty) the curve is drawn without text (frame, curve, plateau
//! line), never an error.

use plotters::coord::ranged1d::{Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
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

/// One curve of a [`chart`]: its legend, points and colour.
pub struct Line<'a> {
    pub label: &'a str,
    pub points: Vec<(f64, f64)>,
    pub color: RGBColor,
    pub width: u32,
}

/// Writes the training loss per step (log scale) and the plateau (the loss of predicting the
/// mean sample) as a PNG at `path`.
pub fn loss_curve(path: &Path, losses: &[f64], plateau: f64) -> Result<(), String> {
    if losses.is_empty() {
        return Err("no steps were taken".into());
    }
    let n = losses.len() as f64;
    let mut lines = vec![Line {
        label: "training loss",
        points: losses
            .iter()
            .enumerate()
            .map(|(i, &v)| (i as f64, v))
            .collect(),
        color: BLUE,
        width: 2,
    }];
    if plateau.is_finite() && plateau > 0.0 {
        lines.push(Line {
            label: "plateau: predicting the mean sample",
            points: vec![(0.0, plateau), (n.max(1.0), plateau)],
            color: RED,
            width: 1,
        });
    }
    chart(
        path,
        "stride train sae: training loss (MSE)",
        "loss",
        &lines,
        Scale::Log,
    )
}

/// The y axis of a [`chart`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    Log,
}

/// Writes `lines` against the step as a PNG at `path`; on a log axis, values that are not
/// finite and positive are drawn at its bottom (on a linear one, non-finite values are).
pub fn chart(
    path: &Path,
    caption: &str,
    y_desc: &str,
    lines: &[Line],
    scale: Scale,
) -> Result<(), String> {
    check_path(path)?;
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let good = |v: f64| v.is_finite() && (scale == Scale::Linear || v > 0.0);
    let vals = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|&v| good(v));
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let (lo, hi) = match (lo.is_finite() && hi.is_finite(), scale) {
        (true, Scale::Log) => (lo / 1.2, hi * 1.2),
        (true, Scale::Linear) => {
            let pad = ((hi - lo) * 0.05).max(1e-3);
            (lo - pad, hi + pad)
        }
        (false, _) => (1e-6, 1.0),
    };
    let xmax = lines
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.0))
        .fold(1f64, f64::max);
    let root = BitMapBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut builder = ChartBuilder::on(&root);
    builder.margin(20);
    let text = have_font();
    if text {
        builder
            .caption(caption, ("sans-serif", 24))
            .x_label_area_size(45)
            .y_label_area_size(80);
    }
    let clamp = |v: f64| if good(v) { v } else { lo };
    match scale {
        Scale::Log => {
            let c = builder
                .build_cartesian_2d(0f64..xmax, (lo..hi).log_scale())
                .map_err(|x| e(&x))?;
            draw(c, &root, text, y_desc, lines, &clamp, true)
        }
        Scale::Linear => {
            let c = builder
                .build_cartesian_2d(0f64..xmax, lo..hi)
                .map_err(|x| e(&x))?;
            draw(c, &root, text, y_desc, lines, &clamp, false)
        }
    }?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// The mesh, the curves and the legend of a [`chart`] on either kind of y axis.
fn draw<'a, Y>(
    mut chart: ChartContext<'a, BitMapBackend<'a>, Cartesian2d<RangedCoordf64, Y>>,
    root: &DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>,
    text: bool,
    y_desc: &str,
    lines: &[Line],
    clamp: &dyn Fn(f64) -> f64,
    scientific: bool,
) -> Result<(), String>
where
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let e = |e: &dyn std::fmt::Display| e.to_string();
    if text {
        chart
            .configure_mesh()
            .x_desc("step")
            .y_desc(y_desc)
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| {
                if scientific {
                    format!("{v:.1e}")
                } else {
                    format!("{v:.2}")
                }
            })
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
    for l in lines {
        let style = l.color.stroke_width(l.width);
        let series = chart
            .draw_series(LineSeries::new(
                l.points.iter().map(|&(x, y)| (x, clamp(y))),
                style,
            ))
            .map_err(|x| e(&x))?;
        if text {
            series
                .label(l.label)
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
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
    Ok(())
}
