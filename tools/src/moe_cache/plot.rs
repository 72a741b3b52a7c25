//! `--plot`: hit rate against cache size, one line per policy and one for
//! Belady's optimum, drawn with `plotters` to SVG.

use anyhow::{anyhow, bail, Result};
use plotters::prelude::*;

use super::sweep::Row;

/// Draw `rows` to `path` (`.svg`); `title` heads the picture.
pub fn draw(path: &std::path::Path, title: &str, rows: &[Row]) -> Result<()> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(|e| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("svg") => {}
        Some("png") => bail!(
            "--plot {}: this build draws SVG only (give a .svg name)",
            path.display()
        ),
        _ => bail!("--plot {}: give a .svg file name", path.display()),
    }
    if rows.is_empty() {
        bail!("--plot: nothing to draw");
    }
    let x_max = rows.iter().map(|r| r.mib).fold(0.0, f64::max) * 1.02;
    let x_min = rows.iter().map(|r| r.mib).fold(f64::INFINITY, f64::min) * 0.98;
    let err = |e: DrawingAreaErrorKind<std::io::Error>| anyhow!("--plot {}: {e}", path.display());
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        .build_cartesian_2d(x_min..x_max.max(x_min + 1e-9), 0.0..100.0)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("cache size (MiB of device memory)")
        .y_desc("hit rate (%)")
        .draw()
        .map_err(err)?;
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.policy.as_str()) {
            names.push(&r.policy);
        }
    }
    for (i, name) in names.iter().enumerate() {
        let color: RGBAColor = if *name == "belady" {
            BLACK.to_rgba()
        } else {
            Palette99::pick(i).to_rgba()
        };
        let mut pts: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| r.policy == *name)
            .map(|r| (r.mib, r.hit_rate * 100.0))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let style = ShapeStyle {
            color: color.to_rgba(),
            filled: true,
            stroke_width: if *name == "belady" { 3 } else { 2 },
        };
        chart
            .draw_series(LineSeries::new(pts, style))
            .map_err(err)?
            .label(*name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}
