//! Charts as SVG: the benchmark like the paper's Figure 6 (grouped bars of the failed
//! share and the mean latency of each strategy, without and with transaction retries), and the hot spot's votes per second against clients, one line per target.
//!
//! Written by hand rather than with a plotting crate: a few rectangles, lines and labels,
//! not a dependency to compile on every build of the workspace.

use crate::bench::{Strategy, VariantResult};
use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const HEIGHT: f64 = 360.0;
const PANEL_W: f64 = 320.0;
const PLOT_TOP: f64 = 60.0;
const PLOT_H: f64 = 220.0;
/// A bar colour per strategy, in [`Strategy::ALL`] order.
const BARS: [&str; 3] = ["#d95f02", "#7570b3", "#1b9e77"];
const BAR_W: f64 = 44.0;
const BAR_STEP: f64 = 48.0;

/// The SVG document; `title` goes on top.
#[must_use]
pub fn figure6(results: &[VariantResult], title: &str) -> String {
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="14">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    panel(&mut svg, 60.0, "failed requests (%)", results, |r| {
        r.failed_pct
    });
    panel(
        &mut svg,
        60.0 + PANEL_W + 60.0,
        "mean latency (ms)",
        results,
        |r| r.latency.mean_ms,
    );
    // Legend.
    for (i, (strategy, colour)) in Strategy::ALL.into_iter().zip(BARS).enumerate() {
        let name = strategy.name();
        #[allow(clippy::cast_precision_loss)]
        let x = WIDTH / 2.0 - 210.0 + 150.0 * i as f64;
        let _ = writeln!(
            svg,
            r#"<rect x="{x}" y="{}" width="12" height="12" fill="{colour}"/>"#,
            HEIGHT - 22.0
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}">{name}</text>"#,
            x + 16.0,
            HEIGHT - 12.0
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// One panel at `left`: groups "w/o Tx retry" and "w/ Tx retry", a bar per strategy.
fn panel(
    svg: &mut String,
    left: f64,
    label: &str,
    results: &[VariantResult],
    value: impl Fn(&VariantResult) -> f64,
) {
    let max = results.iter().map(&value).fold(0.0_f64, f64::max);
    let top = nice_ceiling(max);
    let bottom = PLOT_TOP + PLOT_H;
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">{label}</text>"#,
        left + PANEL_W / 2.0,
        PLOT_TOP - 14.0
    );
    for step in 0..=5 {
        let v = top * f64::from(step) / 5.0;
        let y = bottom - PLOT_H * f64::from(step) / 5.0;
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##,
            left + PANEL_W
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            left - 6.0,
            y + 4.0,
            trim(v)
        );
    }
    let _ = writeln!(
        svg,
        r#"<line x1="{left}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="black"/>"#,
        left + PANEL_W
    );
    for (g, retries) in [false, true].into_iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let group_left = left + 10.0 + 160.0 * g as f64;
        let caption = if retries {
            "w/ Tx retry"
        } else {
            "w/o Tx retry"
        };
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{caption}</text>"#,
            group_left + BAR_STEP * 1.5 - (BAR_STEP - BAR_W) / 2.0,
            bottom + 18.0
        );
        for (b, (strategy, colour)) in Strategy::ALL.into_iter().zip(BARS).enumerate() {
            let Some(r) = results
                .iter()
                .find(|r| r.variant.strategy == strategy && r.variant.retries == retries)
            else {
                continue;
            };
            let v = value(r);
            let h = if top > 0.0 { PLOT_H * v / top } else { 0.0 };
            #[allow(clippy::cast_precision_loss)]
            let x = group_left + BAR_STEP * b as f64;
            let _ = writeln!(
                svg,
                r#"<rect x="{x}" y="{}" width="{BAR_W}" height="{h}" fill="{colour}"><title>{}: {v:.1}</title></rect>"#,
                bottom - h,
                escape(&r.name)
            );
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="middle" font-size="11">{}</text>"#,
                x + BAR_W / 2.0,
                bottom - h - 4.0,
                trim(v)
            );
        }
    }
}

/// The hot-spot chart's grid, value labels and axis captions.
fn axes(
    svg: &mut String,
    top: f64,
    clients: &[usize],
    x_of: &impl Fn(usize) -> f64,
    y_of: &impl Fn(f64) -> f64,
) {
    for step in 0..=5 {
        let v = top * f64::from(step) / 5.0;
        let y = y_of(v);
        let _ = writeln!(
            *svg,
            r##"<line x1="{HS_LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/>"##,
            HS_LEFT + HS_PLOT_W
        );
        let _ = writeln!(
            *svg,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            HS_LEFT - 6.0,
            y + 4.0,
            trim(v)
        );
    }
    for &c in clients {
        let _ = writeln!(
            *svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{c}</text>"#,
            x_of(c),
            HS_TOP + HS_PLOT_H + 18.0
        );
    }
    let _ = writeln!(
        *svg,
        r#"<text x="{}" y="{}" text-anchor="middle">clients</text><text x="20" y="{}" transform="rotate(-90 20 {})" text-anchor="middle">committed votes/s</text>"#,
        HS_LEFT + HS_PLOT_W / 2.0,
        HS_TOP + HS_PLOT_H + 38.0,
        HS_TOP + HS_PLOT_H / 2.0,
        HS_TOP + HS_PLOT_H / 2.0
    );
}

/// Colours of the hot-spot chart's lines, in target order.
const LINES: [&str; 8] = [
    "#000000", "#d95f02", "#1b9e77", "#66a61e", "#7570b3", "#e7298a", "#a6761d", "#e6ab02",
];

const HS_LEFT: f64 = 80.0;
const HS_PLOT_W: f64 = 420.0;
const HS_TOP: f64 = 50.0;
const HS_PLOT_H: f64 = 300.0;

/// Votes per second against clients (a log-2 axis), one line per target, as SVG.
#[must_use]
pub fn hotspot(rows: &[crate::hotspot::HotspotRow], title: &str) -> String {
    const W: f64 = 760.0;
    const H: f64 = 420.0;
    let mut targets: Vec<&str> = Vec::new();
    let mut clients: Vec<usize> = Vec::new();
    for r in rows {
        if !targets.contains(&r.target.as_str()) {
            targets.push(&r.target);
        }
        if !clients.contains(&r.clients) {
            clients.push(r.clients);
        }
    }
    clients.sort_unstable();
    let top = nice_ceiling(rows.iter().map(|r| r.per_sec).fold(0.0, f64::max));
    #[allow(clippy::cast_precision_loss)]
    let x_of = |c: usize| {
        let (lo, hi) = (
            (*clients.first().unwrap_or(&1) as f64).max(1.0).log2(),
            (*clients.last().unwrap_or(&1) as f64).max(1.0).log2(),
        );
        let span = if hi > lo { hi - lo } else { 1.0 };
        HS_LEFT + HS_PLOT_W * ((c as f64).max(1.0).log2() - lo) / span
    };
    let y_of = |v: f64| HS_TOP + HS_PLOT_H - HS_PLOT_H * v / top;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="14">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    axes(&mut svg, top, &clients, &x_of, &y_of);
    for (i, target) in targets.iter().enumerate() {
        let colour = LINES[i % LINES.len()];
        let points: Vec<String> = clients
            .iter()
            .filter_map(|&c| {
                let r = rows
                    .iter()
                    .find(|r| r.clients == c && r.target == *target)?;
                Some(format!("{:.1},{:.1}", x_of(c), y_of(r.per_sec)))
            })
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"/>"#,
            points.join(" ")
        );
        #[allow(clippy::cast_precision_loss)]
        let y = HS_TOP + 10.0 + 22.0 * i as f64;
        let x = HS_LEFT + HS_PLOT_W + 30.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{colour}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            x + 20.0,
            x + 26.0,
            y + 4.0,
            escape(target)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// What one panel of [`adaptive`] plots.
type SampleValue = fn(&crate::adaptive::Sample) -> f64;

/// The adaptive run over time, as SVG: votes per second (top) and shard count (bottom)
/// against seconds, one line per variant.
#[must_use]
pub fn adaptive(samples: &[crate::adaptive::Sample], title: &str) -> String {
    const W: f64 = 760.0;
    const H: f64 = 620.0;
    let mut variants: Vec<&str> = Vec::new();
    for s in samples {
        if !variants.contains(&s.variant.as_str()) {
            variants.push(&s.variant);
        }
    }
    let end = samples.iter().map(|s| s.t_s).fold(1.0, f64::max);
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="14">{}</text>"#,
        W / 2.0,
        escape(title)
    );
    let panels: [(&str, SampleValue, f64); 2] = [
        ("committed votes/s", |s| s.votes_per_sec, 50.0),
        ("shards", |s| f64::from(s.shards), 340.0),
    ];
    for (caption, value, top_y) in panels {
        let top = nice_ceiling(samples.iter().map(value).fold(0.0, f64::max));
        let plot_h = 220.0;
        let x_of = |t: f64| HS_LEFT + HS_PLOT_W * t / end;
        let y_of = |v: f64| top_y + plot_h - plot_h * v / top;
        for step in 0..=4 {
            let v = top * f64::from(step) / 4.0;
            let y = y_of(v);
            let _ = writeln!(
                svg,
                r##"<line x1="{HS_LEFT}" y1="{y}" x2="{}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                HS_LEFT + HS_PLOT_W,
                HS_LEFT - 6.0,
                y + 4.0,
                trim(v)
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">seconds</text><text x="20" y="{}" transform="rotate(-90 20 {})" text-anchor="middle">{caption}</text>"#,
            HS_LEFT + HS_PLOT_W / 2.0,
            top_y + plot_h + 32.0,
            top_y + plot_h / 2.0,
            top_y + plot_h / 2.0
        );
        for step in 0..=4 {
            let t = end * f64::from(step) / 4.0;
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                x_of(t),
                top_y + plot_h + 16.0,
                trim(t)
            );
        }
        for (i, variant) in variants.iter().enumerate() {
            let points: Vec<String> = samples
                .iter()
                .filter(|s| s.variant == *variant)
                .map(|s| format!("{:.1},{:.1}", x_of(s.t_s), y_of(value(s))))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"/>"#,
                points.join(" "),
                LINES[i % LINES.len()]
            );
        }
    }
    for (i, variant) in variants.iter().enumerate() {
        #[allow(clippy::cast_precision_loss)]
        let y = HS_TOP + 10.0 + 22.0 * i as f64;
        let x = HS_LEFT + HS_PLOT_W + 30.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            x + 20.0,
            LINES[i % LINES.len()],
            x + 26.0,
            y + 4.0,
            escape(variant)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// The smallest of 1, 2, 5 times a power of ten that is at least `v` (1 for `v <= 0`).
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

fn trim(v: f64) -> String {
    if v.abs() < f64::EPSILON {
        "0".to_owned()
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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
