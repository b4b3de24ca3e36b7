//! Recall-vs-QPS plots (the ann-benchmarks picture): x = recall@k
//! (linear), y = queries per second (log scale), one curve per
//! `engine/path`, drawn along its Pareto frontier with every measured point
//! marked.
//!
//! The output format follows the extension: `.svg` or `.png`.
//!
//! Text uses the ab_glyph rasteriser with a TrueType font found at run time
//! (`PROX_FONT`, else common DejaVu/Liberation/Noto locations; Debian ships
//! them in `fonts-dejavu-core`). Without a font the plot is still drawn, with
//! no text, and [`plot`] reports that in [`PlotOutcome::text`].

use crate::results::BenchRecord;
use anyhow::{bail, Context, Result};
use plotters::coord::Shift;
use plotters::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

/// Font files tried, in order, after `PROX_FONT`.
const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
];

/// Registers a sans-serif font once per process; `true` if one was found.
fn ensure_font() -> bool {
    static FOUND: OnceLock<bool> = OnceLock::new();
    *FOUND.get_or_init(|| {
        let env = std::env::var_os("PROX_FONT").map(std::path::PathBuf::from);
        let candidates = env
            .into_iter()
            .chain(FONT_CANDIDATES.iter().map(std::path::PathBuf::from));
        for path in candidates {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            // The font registry keeps `&'static` data: one font, leaked once
            // per process by design.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).is_ok() {
                tracing::debug!(font = %path.display(), "plot font");
                return true;
            }
        }
        false
    })
}

/// What [`plot`] drew.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotOutcome {
    /// Curves drawn.
    pub series: usize,
    /// Whether text (title, axes, legend) was drawn.
    pub text: bool,
}

/// A curve: its label and its (recall, qps) points.
type Curve = (String, Vec<(f64, f64)>);

/// Groups records into curves keyed by `engine/path` (with the thread
/// count when the records mix thread counts), points sorted by recall.
fn curves(records: &[BenchRecord]) -> Vec<Curve> {
    let mixed_threads = records
        .iter()
        .map(|r| r.threads)
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        > 1;
    let mut by: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in records {
        if r.qps.is_finite() && r.qps > 0.0 && r.recall.is_finite() {
            by.entry(r.series(mixed_threads))
                .or_default()
                .push((r.recall, r.qps));
        }
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            (k, v)
        })
        .collect()
}

/// The Pareto frontier of `points` sorted by (recall, qps): the points not
/// beaten in both recall and QPS by another point, in recall order.
fn frontier(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out: Vec<(f64, f64)> = Vec::new();
    let mut best_qps = 0.0f64;
    for &(r, q) in points.iter().rev() {
        if q > best_qps {
            out.push((r, q));
            best_qps = q;
        }
    }
    out.reverse();
    out
}

/// Draws `records` to `path` (`.svg` or `.png`) with `title`.
pub fn plot(path: &Path, title: &str, records: &[BenchRecord]) -> Result<PlotOutcome> {
    let curves = curves(records);
    if curves.is_empty() {
        bail!("nothing to plot: no record has a positive QPS");
    }
    let text = ensure_font();
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase())
        .unwrap_or_default();
    let size = (1024, 720);
    let drawn = match ext.as_str() {
        "svg" => draw(
            SVGBackend::new(path, size).into_drawing_area(),
            title,
            &curves,
            text,
        ),
        "png" => draw(
            BitMapBackend::new(path, size).into_drawing_area(),
            title,
            &curves,
            text,
        ),
        _ => bail!(
            "{}: plot format must be .svg or .png (got {ext:?})",
            path.display()
        ),
    };
    drawn.with_context(|| format!("{}: cannot draw plot", path.display()))?;
    Ok(PlotOutcome {
        series: curves.len(),
        text,
    })
}

fn draw<DB: DrawingBackend>(
    area: DrawingArea<DB, Shift>,
    title: &str,
    curves: &[Curve],
    text: bool,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e}");
    area.fill(&WHITE).map_err(err)?;
    let all = curves.iter().flat_map(|c| c.1.iter());
    let (mut rmin, mut qmin, mut qmax) = (1.0f64, f64::INFINITY, 0.0f64);
    for &(r, q) in all {
        rmin = rmin.min(r);
        qmin = qmin.min(q);
        qmax = qmax.max(q);
    }
    // Recall axis from a round floor below the worst point to 1.0; QPS axis
    // padded by a factor of 1.5 either side on the log scale.
    let rlo = ((rmin * 10.0).floor() / 10.0).clamp(0.0, 0.9);
    let (qlo, qhi) = (qmin / 1.5, qmax * 1.5);
    let mut builder = ChartBuilder::on(&area);
    builder.margin(16);
    if text {
        builder
            .caption(title, ("sans-serif", 26))
            .x_label_area_size(48)
            .y_label_area_size(72);
    }
    let mut chart = builder
        .build_cartesian_2d(rlo..1.0f64, (qlo..qhi).log_scale())
        .map_err(err)?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("recall@k")
            .y_desc("queries per second (log)")
            .label_style(("sans-serif", 16))
            .y_label_formatter(&|v| fmt_qps(*v));
    } else {
        mesh.x_labels(0).y_labels(0);
    }
    mesh.draw().map_err(err)?;
    for (i, (label, points)) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let front = frontier(points);
        let series = chart
            .draw_series(LineSeries::new(front, color.stroke_width(2)))
            .map_err(err)?;
        if text {
            series.label(label.clone()).legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        }
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(err)?;
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()
            .map_err(err)?;
    }
    area.present().map_err(err)?;
    Ok(())
}

fn fmt_qps(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else {
        format!("{v:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontier_keeps_only_undominated_points() {
        let pts = [
            (0.5, 900.0),
            (0.6, 1000.0),
            (0.8, 500.0),
            (0.9, 600.0),
            (0.99, 100.0),
        ];
        assert_eq!(
            frontier(&pts),
            vec![(0.6, 1000.0), (0.9, 600.0), (0.99, 100.0)]
        );
    }
}
