//! `--report out.html`: the figures on one self-contained page: inline CSS and SVG, no
//! script, nothing fetched. The summary table (configs side by side), utilisation histograms
//! per dimension, placements and failures over time, per-server stacked bars (RAM by VM
//! size) rack by rack, and the VMs that landed differently.

use std::fmt::Write;

use serde_json::Value;

use super::report::{band_label, BAND};
use super::text::{arr, num, rows};

/// A and B's colours; the RAM classes' colours (the last is "other").
const RUN_COLOURS: [&str; 2] = ["#2f6db5", "#e07b22"];
const CLASS_COLOURS: [&str; 8] =
    ["#4e79a7", "#59a14f", "#edc948", "#b07aa1", "#76b7b2", "#ff9da7", "#9c755f", "#bab0ac"];
/// Servers in one row of the rack layout before it wraps.
const ROW_SERVERS: usize = 48;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

fn run_label(i: usize, run: &Value) -> String {
    format!("{}: {}", ["A", "B"].get(i).unwrap_or(&"?"), run["config"].as_str().unwrap_or(""))
}

/// The page.
pub fn page(doc: &Value) -> String {
    let runs = arr(&doc["runs"]);
    let mut h = String::with_capacity(64 * 1024);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n");
    h.push_str("<title>dapi simulate</title>\n<style>\n");
    h.push_str(
        "body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:1200px}\n\
         table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\n\
         th{background:#f3f3f3}svg{display:block;margin:8px 0 20px}.axis{font-size:11px;fill:#555}\n\
         .legend span{display:inline-block;margin-right:14px}.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}\n\
         h2{margin-top:32px;border-bottom:1px solid #ddd}code{font-size:12px}\n",
    );
    h.push_str("</style></head><body>\n<h1>dapi simulate</h1>\n");
    let dc = &doc["datacenter"];
    let w = &doc["workload"];
    let _ = writeln!(
        h,
        "<p id=\"inputs\">{} servers in {} racks ({}); workload: {} ({} VMs, {} creations, {} destructions); seed {}, concurrency {}.</p>",
        num(&dc["servers"]),
        num(&dc["racks"]),
        esc(dc["source"].as_str().unwrap_or("")),
        esc(w["source"].as_str().unwrap_or("")),
        num(&w["vms"]),
        num(&w["creations"]),
        num(&w["destructions"]),
        num(&w["seed"]),
        num(&w["concurrency"]),
    );
    legend_runs(&mut h, runs);

    // Summary table.
    h.push_str("<h2>Summary</h2>\n<table id=\"summary\"><tr><th></th>");
    for (i, r) in runs.iter().enumerate() {
        let _ = write!(h, "<th>{}</th>", esc(&run_label(i, r)));
    }
    h.push_str("</tr>\n");
    for (name, f) in rows() {
        let _ = write!(h, "<tr><th>{}</th>", esc(name));
        for r in runs {
            let _ = write!(h, "<td>{}</td>", esc(&f(r)));
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");

    h.push_str("<h2>Utilisation over servers</h2>\n<p>Servers per 5% band, for each dimension.</p>\n");
    for (dim, title) in
        [("ram", "RAM (of what VMs may use)"), ("disk", "Disk (of the pool)"), ("cpu", "CPU (caps over cores)")]
    {
        let _ = writeln!(h, "<h3>{title}</h3>");
        histogram_svg(&mut h, dim, runs);
    }

    h.push_str("<h2>Over time</h2>\n<p>Placements and failures so far (left), RAM in use (right), by event.</p>\n");
    timeline_svg(&mut h, runs);

    h.push_str("<h2>Servers by rack</h2>\n<p>Each bar a server, its RAM filled by VM size; a row per rack.</p>\n");
    let classes = arr(&doc["classes"]);
    h.push_str("<p class=\"legend\">");
    for (i, c) in classes.iter().enumerate() {
        let _ = write!(
            h,
            "<span><i class=\"sw\" style=\"background:{}\"></i>{}</span>",
            CLASS_COLOURS[i.min(CLASS_COLOURS.len() - 1)],
            esc(c.as_str().unwrap_or(""))
        );
    }
    h.push_str("</p>\n");
    for (i, r) in runs.iter().enumerate() {
        let _ = writeln!(h, "<h3>{}</h3>", esc(&run_label(i, r)));
        racks_svg(&mut h, i, r);
    }

    let compare = &doc["compare"];
    if !compare.is_null() {
        let _ = writeln!(
            h,
            "<h2>Landed differently</h2>\n<p id=\"moved\">{} VMs: {} on another server, {} placed by A only, {} by B only.</p>",
            num(&compare["moved"]),
            num(&compare["other_server"]),
            num(&compare["placed_by_a_only"]),
            num(&compare["placed_by_b_only"])
        );
        let moved = arr(&compare["vms"]);
        if !moved.is_empty() {
            h.push_str("<table><tr><th>VM</th><th>A</th><th>B</th></tr>\n");
            for m in moved.iter().take(200) {
                let side = |v: &Value| esc(v.as_str().unwrap_or("(failed)"));
                let _ = writeln!(
                    h,
                    "<tr><td><code>{}</code></td><td><code>{}</code></td><td><code>{}</code></td></tr>",
                    esc(m["uuid"].as_str().unwrap_or("")),
                    side(&m["a"]),
                    side(&m["b"])
                );
            }
            h.push_str("</table>\n");
            if moved.len() > 200 {
                let _ = writeln!(h, "<p>... and {} more (all of them in <code>--json</code>).</p>", moved.len() - 200);
            }
        }
    }
    h.push_str("</body></html>\n");
    h
}

fn legend_runs(h: &mut String, runs: &[Value]) {
    h.push_str("<p class=\"legend\">");
    for (i, r) in runs.iter().enumerate() {
        let _ = write!(
            h,
            "<span><i class=\"sw\" style=\"background:{}\"></i>{}</span>",
            RUN_COLOURS[i % 2],
            esc(&run_label(i, r))
        );
    }
    h.push_str("</p>\n");
}

/// Bars per 5% band, one per run side by side.
fn histogram_svg(h: &mut String, dim: &str, runs: &[Value]) {
    let (width, height, left, bottom, top) = (900.0, 220.0, 40.0, 24.0, 10.0);
    let bands = 100 / BAND;
    let counts: Vec<Vec<f64>> = runs
        .iter()
        .map(|r| arr(&r["utilisation"][dim]["histogram"]).iter().map(|v| v.as_f64().unwrap_or(0.0)).collect())
        .collect();
    let max = counts.iter().flatten().copied().fold(1.0, f64::max);
    let plot_h = height - bottom - top;
    let slot = (width - left) / bands as f64;
    let bar = (slot - 4.0) / runs.len().max(1) as f64;
    let _ = writeln!(h, "<svg id=\"histogram-{dim}\" viewBox=\"0 0 {width} {height}\" width=\"100%\" role=\"img\">");
    let _ = writeln!(
        h,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{width}\" y2=\"{}\" stroke=\"#888\"/>",
        height - bottom,
        height - bottom
    );
    let _ = writeln!(h, "<text class=\"axis\" x=\"2\" y=\"{}\">{}</text>", top + 10.0, max);
    for b in 0..bands {
        let x0 = left + b as f64 * slot + 2.0;
        for (i, c) in counts.iter().enumerate() {
            let n = c.get(b).copied().unwrap_or(0.0);
            let bh = plot_h * n / max;
            let _ = writeln!(
                h,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {} servers</title></rect>",
                x0 + i as f64 * bar,
                height - bottom - bh,
                bar,
                bh,
                RUN_COLOURS[i % 2],
                band_label(b, bands),
                n
            );
        }
        if b % 2 == 0 {
            let _ = writeln!(h, "<text class=\"axis\" x=\"{:.1}\" y=\"{}\">{}%</text>", x0, height - 8.0, b * BAND);
        }
    }
    h.push_str("</svg>\n");
}

/// Cumulative placements (solid) and failures (dashed) per run, and RAM in use.
fn timeline_svg(h: &mut String, runs: &[Value]) {
    let (width, height, pad) = (440.0, 220.0, 34.0);
    let series: Vec<&[Value]> = runs.iter().map(|r| arr(&r["timeline"])).collect();
    let events = series.iter().flat_map(|s| s.last()).map(|p| p["events"].as_f64().unwrap_or(0.0)).fold(1.0, f64::max);
    let count_max = series
        .iter()
        .flat_map(|s| s.iter())
        .map(|p| p["placed"].as_f64().unwrap_or(0.0).max(p["failed"].as_f64().unwrap_or(0.0)))
        .fold(1.0, f64::max);
    let ram_max =
        series.iter().flat_map(|s| s.iter()).map(|p| p["ram_pct"].as_f64().unwrap_or(0.0)).fold(100.0, f64::max);
    let _ = writeln!(
        h,
        "<svg id=\"timeline\" viewBox=\"0 0 {} {height}\" width=\"100%\" role=\"img\">",
        width * 2.0 + 20.0
    );
    for (panel, (title, ymax)) in
        [("placements, failures", count_max), ("RAM in use %", ram_max)].into_iter().enumerate()
    {
        let ox = panel as f64 * (width + 20.0);
        let x = |e: f64| ox + pad + (width - pad - 6.0) * e / events;
        let y = |v: f64| height - pad - (height - pad - 16.0) * v / ymax;
        let _ = writeln!(
            h,
            "<rect x=\"{}\" y=\"16\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#ccc\"/>\
             <text class=\"axis\" x=\"{}\" y=\"12\">{title}</text><text class=\"axis\" x=\"{}\" y=\"26\">{ymax}</text>\
             <text class=\"axis\" x=\"{}\" y=\"{}\">0</text><text class=\"axis\" x=\"{}\" y=\"{}\">{} events</text>",
            ox + pad,
            width - pad - 6.0,
            height - pad - 16.0,
            ox + pad,
            ox + 2.0,
            ox + pad,
            height - pad + 14.0,
            ox + width - 90.0,
            height - pad + 14.0,
            events
        );
        for (i, points) in series.iter().enumerate() {
            let keys: &[(&str, &str)] = if panel == 0 {
                &[("placed", ""), ("failed", " stroke-dasharray=\"5,3\"")]
            } else {
                &[("ram_pct", "")]
            };
            for (key, dash) in keys {
                let mut path = format!("M{:.1},{:.1}", x(0.0), y(0.0));
                for p in points.iter() {
                    let _ = write!(
                        path,
                        " L{:.1},{:.1}",
                        x(p["events"].as_f64().unwrap_or(0.0)),
                        y(p[*key].as_f64().unwrap_or(0.0))
                    );
                }
                let _ = writeln!(h, "<path d=\"{path}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{dash}><title>{key}</title></path>", RUN_COLOURS[i % 2]);
            }
        }
    }
    h.push_str("</svg>\n");
}

/// A row per rack (wrapped past [`ROW_SERVERS`]), a bar per server: RAM by class, the rest
/// light grey.
fn racks_svg(h: &mut String, index: usize, run: &Value) {
    let mut racks: Vec<(String, Vec<&Value>)> = Vec::new();
    for s in arr(&run["servers"]) {
        let rack = s["rack"].as_str().unwrap_or("-").to_string();
        match racks.iter_mut().find(|(r, _)| *r == rack) {
            Some((_, list)) => list.push(s),
            None => racks.push((rack, vec![s])),
        }
    }
    let rows: Vec<(String, &[&Value])> = racks
        .iter()
        .flat_map(|(rack, list)| {
            list.chunks(ROW_SERVERS)
                .enumerate()
                .map(move |(i, c)| (if i == 0 { rack.clone() } else { String::new() }, c))
        })
        .collect();
    let (label_w, bar_w, gap, row_h, bar_h) = (70.0, 14.0, 3.0, 46.0, 38.0);
    let width = label_w + ROW_SERVERS as f64 * (bar_w + gap);
    let height = rows.len() as f64 * row_h + 4.0;
    let _ = writeln!(h, "<svg id=\"racks-{index}\" viewBox=\"0 0 {width} {height}\" width=\"100%\" role=\"img\">");
    for (r, (rack, servers)) in rows.iter().enumerate() {
        let top = r as f64 * row_h + 2.0;
        let _ = writeln!(h, "<text class=\"axis\" x=\"0\" y=\"{:.1}\">{}</text>", top + bar_h / 2.0 + 4.0, esc(rack));
        for (i, s) in servers.iter().enumerate() {
            let x = label_w + i as f64 * (bar_w + gap);
            let _ = writeln!(
                h,
                "<g><title>{} {}: {} VMs, RAM {}%, disk {}%, CPU {}%</title><rect x=\"{x:.1}\" y=\"{top:.1}\" width=\"{bar_w}\" height=\"{bar_h}\" fill=\"#eee\"/>",
                esc(s["hostname"].as_str().unwrap_or("")),
                esc(s["uuid"].as_str().unwrap_or("")),
                num(&s["vms"]),
                num(&s["ram_pct"]),
                num(&s["disk_pct"]),
                num(&s["cpu_pct"])
            );
            let mut filled = 0.0;
            for (c, share) in arr(&s["ram_by_class_pct"]).iter().enumerate() {
                let share = share.as_f64().unwrap_or(0.0).max(0.0);
                let seg = (bar_h * share / 100.0).min(bar_h - filled).max(0.0);
                if seg > 0.0 {
                    let _ = write!(
                        h,
                        "<rect x=\"{x:.1}\" y=\"{:.2}\" width=\"{bar_w}\" height=\"{seg:.2}\" fill=\"{}\"/>",
                        top + bar_h - filled - seg,
                        CLASS_COLOURS[c.min(CLASS_COLOURS.len() - 1)]
                    );
                    filled += seg;
                }
            }
            h.push_str("</g>\n");
        }
    }
    h.push_str("</svg>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(esc("<a href=\"x\">&</a>"), "&lt;a href=&quot;x&quot;&gt;&amp;&lt;/a&gt;");
    }

    /// The last band holds everything from 95% up (a CPU cap over the cores can be 300%).
    #[test]
    fn the_last_band_is_named_open_ended() {
        let mut h = String::new();
        let mut histogram = vec![0; 20];
        histogram[0] = 1;
        histogram[19] = 4;
        histogram_svg(&mut h, "cpu", &[serde_json::json!({"utilisation": {"cpu": {"histogram": histogram}}})]);
        assert!(h.contains("<title>95%+: 4 servers</title>"), "{h}");
        assert!(h.contains("<title>0-5%: 1 servers</title>"), "{h}");
        assert!(!h.contains("95-100%"), "{h}");
    }
}
