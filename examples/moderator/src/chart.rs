//! Charts as SVG, drawn with `plotters`: the benchmark like the paper's Figure 6 (grouped
//! bars of the failed share and the mean latency of each strategy, without and with
//! transaction retries), the hot spot's votes per second against clients (one line per
//! target), and the adaptive run's votes per second and shard count over time.

use crate::adaptive::Sample;
use crate::bench::{Strategy, VariantResult};
use crate::hotspot::HotspotRow;
use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// A bar colour per strategy, in [`Strategy::ALL`] order.
const BARS: [RGBColor; 3] = [
    RGBColor(0xd9, 0x5f, 0x02),
    RGBColor(0x75, 0x70, 0xb3),
    RGBColor(0x1b, 0x9e, 0x77),
];

/// Line colours, in the order of the targets or variants drawn.
const LINES: [RGBColor; 8] = [
    RGBColor(0x00, 0x00, 0x00),
    RGBColor(0xd9, 0x5f, 0x02),
    RGBColor(0x1b, 0x9e, 0x77),
    RGBColor(0x66, 0xa6, 0x1e),
    RGBColor(0x75, 0x70, 0xb3),
    RGBColor(0xe7, 0x29, 0x8a),
    RGBColor(0xa6, 0x76, 0x1d),
    RGBColor(0xe6, 0xab, 0x02),
];

const FONT: &str = "sans-serif";

/// What drawing into a string can fail with, as text.
fn failed(e: impl std::fmt::Display) -> String {
    format!("cannot draw the chart: {e}")
}

/// The SVG text of a `size` chart drawn by `draw` on a white area titled `title`.
fn svg(
    size: (u32, u32),
    title: &str,
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), String>,
) -> Result<String, String> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE).map_err(failed)?;
        let area = root.titled(title, (FONT, 14)).map_err(failed)?;
        draw(&area)?;
        root.present().map_err(failed)?;
    }
    Ok(out)
}

/// The smallest of 1, 2, 5 times a power of ten that is at least `v` (1 for `v <= 0`):
/// the top of an axis.
fn nice_ceiling(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let magnitude = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|c| *c >= v)
        .unwrap_or(10.0 * magnitude)
}

/// A value as a bar's label: whole above 10, one decimal below.
fn trim(v: f64) -> String {
    if v.abs() < f64::EPSILON {
        "0".to_owned()
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The benchmark as the paper's Figure 6: the failed share (left) and the mean latency
/// (right), each with the groups "w/o Tx retry" and "w/ Tx retry" and a bar per strategy.
///
/// # Errors
/// When drawing fails (a message).
pub fn figure6(results: &[VariantResult], title: &str) -> Result<String, String> {
    svg((760, 380), title, |area| {
        let (left, right) = area.split_horizontally(380);
        bars(
            &left,
            "failed requests (%)",
            results,
            |r| r.failed_pct,
            true,
        )?;
        bars(
            &right,
            "mean latency (ms)",
            results,
            |r| r.latency.mean_ms,
            false,
        )
    })
}

/// One panel of [`figure6`]: x from 0 to 2, group `g` (without, then with retries) over
/// `[g, g + 1]`, its bars in [`Strategy::ALL`] order.
fn bars(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    caption: &str,
    results: &[VariantResult],
    value: impl Fn(&VariantResult) -> f64,
    legend: bool,
) -> Result<(), String> {
    const WIDTH: f64 = 0.26;
    let top = nice_ceiling(results.iter().map(&value).fold(0.0_f64, f64::max));
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 13))
        .margin(12)
        .x_label_area_size(28)
        .y_label_area_size(48)
        .build_cartesian_2d(0.0..2.0, 0.0..top * 1.08)
        .map_err(failed)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .disable_x_mesh()
        .x_labels(5)
        .x_label_formatter(&|x: &f64| match *x {
            x if (x - 0.5).abs() < 1e-9 => "w/o Tx retry".to_owned(),
            x if (x - 1.5).abs() < 1e-9 => "w/ Tx retry".to_owned(),
            _ => String::new(),
        })
        .y_labels(6)
        .y_label_formatter(&|y| trim(*y))
        .draw()
        .map_err(failed)?;
    for (b, (strategy, colour)) in Strategy::ALL.into_iter().zip(BARS).enumerate() {
        let group = |retries: bool| {
            let r = results
                .iter()
                .find(|r| r.variant.strategy == strategy && r.variant.retries == retries)?;
            #[allow(clippy::cast_precision_loss)]
            let x = f64::from(u8::from(retries)) + 0.11 + (WIDTH + 0.01) * b as f64;
            Some((x, value(r)))
        };
        let drawn: Vec<(f64, f64)> = [false, true].into_iter().filter_map(group).collect();
        let series = chart
            .draw_series(
                drawn
                    .iter()
                    .map(|&(x, v)| Rectangle::new([(x, 0.0), (x + WIDTH, v)], colour.filled())),
            )
            .map_err(failed)?;
        if legend {
            series.label(strategy.name()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 10, y + 5)], colour.filled())
            });
        }
        let above = TextStyle::from((FONT, 11)).pos(Pos::new(HPos::Center, VPos::Bottom));
        chart
            .draw_series(
                drawn
                    .iter()
                    .map(|&(x, v)| Text::new(trim(v), (x + WIDTH / 2.0, v), above.clone())),
            )
            .map_err(failed)?;
    }
    if legend {
        draw_legend(&mut chart)?;
    }
    Ok(())
}

/// `lines` (a name and its points each) in one panel of `area`, with a legend; `x_labels`
/// gives how many labels the x axis has and how they read.
fn lines(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    axes: (&str, &str),
    x: std::ops::Range<f64>,
    x_labels: (usize, &dyn Fn(&f64) -> String),
    lines: &[(&str, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let top = nice_ceiling(
        lines
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(x, 0.0..top)
        .map_err(failed)?;
    chart
        .configure_mesh()
        .light_line_style(WHITE)
        .x_desc(axes.0)
        .y_desc(axes.1)
        .x_labels(x_labels.0)
        .x_label_formatter(x_labels.1)
        .y_label_formatter(&|y| trim(*y))
        .draw()
        .map_err(failed)?;
    for (i, (name, points)) in lines.iter().enumerate() {
        let colour = LINES[i % LINES.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                colour.stroke_width(2),
            ))
            .map_err(failed)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
    }
    draw_legend(&mut chart)
}

/// The legend of the series drawn with labels, in the upper left corner.
fn draw_legend<'a>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
) -> Result<(), String> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(failed)
}

/// Votes per second against clients (a log-2 axis), one line per target.
///
/// # Errors
/// When drawing fails (a message).
pub fn hotspot(rows: &[HotspotRow], title: &str) -> Result<String, String> {
    let mut targets: Vec<&str> = Vec::new();
    for r in rows {
        if !targets.contains(&r.target.as_str()) {
            targets.push(&r.target);
        }
    }
    #[allow(clippy::cast_precision_loss)]
    let log2 = |clients: usize| (clients.max(1) as f64).log2();
    let series: Vec<(&str, Vec<(f64, f64)>)> = targets
        .iter()
        .map(|target| {
            let mut points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.target == *target)
                .map(|r| (log2(r.clients), r.per_sec))
                .collect();
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
            (*target, points)
        })
        .collect();
    let lo = rows
        .iter()
        .map(|r| log2(r.clients))
        .fold(f64::INFINITY, f64::min);
    let hi = rows.iter().map(|r| log2(r.clients)).fold(0.0, f64::max);
    let (lo, hi) = if lo < hi {
        (lo.floor(), hi.ceil())
    } else {
        (0.0, lo.max(0.0).ceil() + 1.0)
    };
    // A label at each power of two.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let labels = (hi - lo) as usize + 1;
    svg((760, 440), title, |area| {
        lines(
            area,
            ("clients", "committed votes/s"),
            lo..hi,
            (labels, &|x| format!("{:.0}", 2f64.powf(*x))),
            &series,
        )
    })
}

/// The adaptive run over time: votes per second (top) and shard count (bottom) against
/// seconds, one line per variant.
///
/// # Errors
/// When drawing fails (a message).
pub fn adaptive(samples: &[Sample], title: &str) -> Result<String, String> {
    let mut variants: Vec<&str> = Vec::new();
    for s in samples {
        if !variants.contains(&s.variant.as_str()) {
            variants.push(&s.variant);
        }
    }
    let end = samples.iter().map(|s| s.t_s).fold(1.0, f64::max);
    let series = |value: fn(&Sample) -> f64| -> Vec<(&str, Vec<(f64, f64)>)> {
        variants
            .iter()
            .map(|variant| {
                let points = samples
                    .iter()
                    .filter(|s| s.variant == *variant)
                    .map(|s| (s.t_s, value(s)))
                    .collect();
                (*variant, points)
            })
            .collect()
    };
    let votes = series(|s| s.votes_per_sec);
    let shards = series(|s| f64::from(s.shards));
    svg((760, 640), title, |area| {
        let (upper, lower) = area.split_vertically(310);
        let seconds = |x: &f64| format!("{x:.0}");
        lines(
            &upper,
            ("seconds", "committed votes/s"),
            0.0..end,
            (10, &seconds),
            &votes,
        )?;
        lines(
            &lower,
            ("seconds", "shards"),
            0.0..end,
            (10, &seconds),
            &shards,
        )
    })
}

#[cfg(test)]
mod tests {
    use super::nice_ceiling;

    #[test]
    fn axis_tops_are_round() {
        assert!((nice_ceiling(23.0) - 50.0).abs() < 1e-9);
        assert!((nice_ceiling(430.0) - 500.0).abs() < 1e-9);
        assert!((nice_ceiling(0.0) - 1.0).abs() < 1e-9);
        assert!((nice_ceiling(1.0) - 1.0).abs() < 1e-9);
    }
}
