//! Hand-written SVG charts for `--plot DIR`: goodput per row (median bar,
//! min–max whisker) and the ping-pong latency CDF (log-scaled µs); and, for
//! `cc-lab`, series over linear axes, as lines or as points.

use std::fmt::Write as _;

use super::report::{Report, Status};

const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Escapes text for XML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

fn header(out: &mut String, w: u32, h: u32, title: &str) {
    let _ = write!(
        out,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">
<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>
<text x="{}" y="20" text-anchor="middle" font-size="15">{}</text>
"#,
        w / 2,
        escape(title)
    );
}

/// Series `i`'s colour swatch and name in the legend right of the plot
/// area, which ends at `x0`.
fn legend_entry(out: &mut String, i: usize, name: &str, x0: f64, top: f64) {
    let color = PALETTE[i % PALETTE.len()];
    let ly = top + 14.0 + 18.0 * i as f64;
    let _ = writeln!(
        out,
        r#"<rect x="{0:.1}" y="{1:.1}" width="14" height="4" fill="{color}"/><text x="{2:.1}" y="{3:.1}">{4}</text>"#,
        x0 + 10.0,
        ly - 4.0,
        x0 + 28.0,
        ly + 1.0,
        escape(name)
    );
}

/// A "nice" axis maximum at or above `v`.
fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|&c| c >= v)
        .unwrap_or(10.0 * mag)
}

/// Goodput per row: a bar at the median, a whisker from min to max; rows
/// without a figure are labelled with their status.
pub fn goodput_chart(report: &Report) -> String {
    let rows = &report.rows;
    let bar_h = 22u32;
    let (left, right, top) = (230u32, 40u32, 40u32);
    let w = 900u32;
    let h = top + 40 + bar_h * rows.len().max(1) as u32;
    let max = rows
        .iter()
        .filter_map(|r| r.goodput_gbps.map(|g| g.max))
        .fold(0.0, f64::max);
    let axis = nice_max(max);
    let plot_w = f64::from(w - left - right);
    let x = |v: f64| f64::from(left) + plot_w * (v / axis).clamp(0.0, 1.0);
    let mut out = String::new();
    header(
        &mut out,
        w,
        h,
        "Goodput per scenario (Gbit/s, median with min–max)",
    );
    let base_y = top + bar_h * rows.len() as u32;
    for k in 0..=5 {
        let v = axis * f64::from(k) / 5.0;
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{base_y}" stroke="#ddd"/><text x="{0:.1}" y="{1}" text-anchor="middle">{2}</text>"##,
            x(v),
            base_y + 16,
            escape(&format!("{v:.1}"))
        );
    }
    for (i, r) in rows.iter().enumerate() {
        let y = top + bar_h * i as u32;
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            left - 6,
            y + bar_h / 2 + 4,
            escape(&r.key)
        );
        match r.goodput_gbps {
            Some(g) => {
                let color = PALETTE[r.scenario as usize % PALETTE.len()];
                let _ = writeln!(
                    out,
                    r#"<rect x="{left}" y="{}" width="{:.1}" height="{}" fill="{color}"/>"#,
                    y + 3,
                    x(g.median) - f64::from(left),
                    bar_h - 6
                );
                let cy = f64::from(y + bar_h / 2);
                let _ = writeln!(
                    out,
                    r##"<line x1="{:.1}" y1="{cy}" x2="{:.1}" y2="{cy}" stroke="#000"/><line x1="{0:.1}" y1="{2}" x2="{0:.1}" y2="{3}" stroke="#000"/><line x1="{1:.1}" y1="{2}" x2="{1:.1}" y2="{3}" stroke="#000"/>"##,
                    x(g.min),
                    x(g.max),
                    cy - 5.0,
                    cy + 5.0
                );
                let _ = writeln!(
                    out,
                    r#"<text x="{:.1}" y="{}">{}</text>"#,
                    x(g.max) + 4.0,
                    y + bar_h / 2 + 4,
                    escape(&format!("{:.2}", g.median))
                );
            }
            None => {
                let label = match r.status {
                    Status::Unavailable => "n/a (not available)",
                    _ => "failed",
                };
                let _ = writeln!(
                    out,
                    r##"<text x="{}" y="{}" fill="#888">{}</text>"##,
                    left + 4,
                    y + bar_h / 2 + 4,
                    escape(label)
                );
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

/// Ping-pong round-trip latency CDF, one line per row that has one; the x
/// axis is logarithmic in µs.
pub fn latency_cdf_chart(report: &Report) -> String {
    let (w, h) = (900u32, 520u32);
    let (left, right, top, bottom) = (60.0, 220.0, 40.0, 50.0);
    let series: Vec<(&str, &[(f64, f64)])> = report
        .rows
        .iter()
        .filter_map(|r| {
            r.latency
                .as_ref()
                .map(|l| (r.key.as_str(), l.cdf.as_slice()))
        })
        .filter(|(_, c)| !c.is_empty())
        .collect();
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for (_, c) in &series {
        for &(_, us) in *c {
            if us > 0.0 {
                lo = lo.min(us);
                hi = hi.max(us);
            }
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (1.0, 10.0);
    }
    let (dlo, dhi) = (
        lo.log10().floor(),
        hi.log10().ceil().max(lo.log10().floor() + 1.0),
    );
    let pw = f64::from(w) - left - right;
    let ph = f64::from(h) - top - bottom;
    let x = |us: f64| left + pw * ((us.max(1e-3).log10() - dlo) / (dhi - dlo)).clamp(0.0, 1.0);
    let y = |q: f64| top + ph * (1.0 - q.clamp(0.0, 1.0));
    let mut out = String::new();
    header(&mut out, w, h, "64 B ping-pong round-trip latency CDF");
    let mut d = dlo;
    while d <= dhi + 1e-9 {
        let v = 10f64.powf(d);
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1:.1}" stroke="#ddd"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
            x(v),
            top + ph,
            top + ph + 16.0,
            escape(&format!("{v} µs"))
        );
        d += 1.0;
    }
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#eee"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            y(q),
            left + pw,
            left - 4.0,
            y(q) + 4.0,
            q
        );
    }
    for (i, (name, cdf)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let points: Vec<String> = cdf
            .iter()
            .map(|&(q, us)| format!("{:.1},{:.1}", x(us), y(q)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        legend_entry(&mut out, i, name, left + pw, top);
    }
    if series.is_empty() {
        let _ = writeln!(
            out,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#888">no latency measured</text>"##,
            w / 2,
            h / 2
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">round trip (µs, log scale)</text>"#,
        left + pw / 2.0,
        h - 8
    );
    out.push_str("</svg>\n");
    out
}

/// One named series of `(x, y)` points for [`xy_chart`].
pub type Series = (String, Vec<(f64, f64)>);

/// Series over linear axes from 0: joined by lines (`lines`), or as
/// points with their name beside (a Pantheon-style scatter).
pub fn xy_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    lines: bool,
) -> String {
    let (w, h) = (900u32, 520u32);
    let (left, right, top, bottom) = (70.0, 220.0, 40.0, 50.0);
    let pw = f64::from(w) - left - right;
    let ph = f64::from(h) - top - bottom;
    let all = || series.iter().flat_map(|(_, p)| p.iter());
    let xmax = nice_max(all().map(|p| p.0).fold(0.0, f64::max));
    let ymax = nice_max(all().map(|p| p.1).fold(0.0, f64::max));
    let x = |v: f64| left + pw * (v / xmax).clamp(0.0, 1.0);
    let y = |v: f64| top + ph * (1.0 - (v / ymax).clamp(0.0, 1.0));
    let mut out = String::new();
    header(&mut out, w, h, title);
    for k in 0..=4 {
        let (fx, fy) = (xmax * f64::from(k) / 4.0, ymax * f64::from(k) / 4.0);
        let _ = writeln!(
            out,
            r##"<line x1="{0:.1}" y1="{top}" x2="{0:.1}" y2="{1:.1}" stroke="#eee"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
            x(fx),
            top + ph,
            top + ph + 16.0,
            escape(
                format!("{fx:.3}")
                    .trim_end_matches('0')
                    .trim_end_matches('.')
            )
        );
        let _ = writeln!(
            out,
            r##"<line x1="{left}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#eee"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            y(fy),
            left + pw,
            left - 4.0,
            y(fy) + 4.0,
            escape(
                format!("{fy:.3}")
                    .trim_end_matches('0')
                    .trim_end_matches('.')
            )
        );
    }
    for (i, (name, points)) in series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        if lines {
            let pts: Vec<String> = points
                .iter()
                .map(|&(a, b)| format!("{:.1},{:.1}", x(a), y(b)))
                .collect();
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
                pts.join(" ")
            );
        } else {
            for &(a, b) in points {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="5" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
                    x(a),
                    y(b),
                    x(a) + 7.0,
                    y(b) - 7.0,
                    escape(name)
                );
            }
        }
        legend_entry(&mut out, i, name, left + pw, top);
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text><text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        left + pw / 2.0,
        h - 8,
        escape(x_label),
        top + ph / 2.0,
        top + ph / 2.0,
        escape(y_label)
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::report::tests::sample;
    use super::*;

    /// Checks that `doc` is well-formed XML as far as this module writes
    /// it: one prolog, balanced and properly nested elements, quoted
    /// attributes, no raw `<` or `&` in text.
    pub(crate) fn well_formed(doc: &str) -> Result<(), String> {
        let body = doc
            .strip_prefix("<?xml version=\"1.0\" encoding=\"UTF-8\"?>")
            .ok_or("no XML prolog")?;
        let mut stack: Vec<String> = Vec::new();
        let mut rest = body;
        let mut roots = 0;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            if let Some(amp) = text.find('&') {
                let ent = &text[amp..];
                if !["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                    .iter()
                    .any(|e| ent.starts_with(e))
                {
                    return Err(format!("bare & in text {text:?}"));
                }
            }
            let close = rest[open..].find('>').ok_or("unterminated tag")? + open;
            let tag = &rest[open + 1..close];
            if tag.contains('<') {
                return Err(format!("'<' inside tag {tag:?}"));
            }
            if tag.matches('"').count() % 2 != 0 {
                return Err(format!("unbalanced quotes in {tag:?}"));
            }
            if let Some(name) = tag.strip_prefix('/') {
                match stack.pop() {
                    Some(open_name) if open_name == name.trim() => {}
                    other => return Err(format!("</{name}> closes {other:?}")),
                }
            } else if !tag.ends_with('/') {
                let name: String = tag.chars().take_while(|c| !c.is_whitespace()).collect();
                if stack.is_empty() {
                    roots += 1;
                }
                stack.push(name);
            } else if stack.is_empty() {
                return Err("element outside the root".into());
            }
            rest = &rest[close + 1..];
        }
        if !rest.trim().is_empty() {
            return Err("text after the root".into());
        }
        match (stack.is_empty(), roots) {
            (true, 1) => Ok(()),
            _ => Err(format!("unclosed {stack:?} or {roots} roots")),
        }
    }

    #[test]
    fn xy_charts_are_well_formed_lines_or_points() {
        let series = vec![
            (
                "cubic <a&b>".to_owned(),
                vec![(0.0, 1.0), (1.0, 3.0), (2.0, 2.5)],
            ),
            ("bbr".to_owned(), vec![(0.5, 0.2)]),
        ];
        let lines = xy_chart("cwnd", "time (s)", "cwnd (KB)", &series, true);
        well_formed(&lines).expect("well-formed");
        assert_eq!(lines.matches("<polyline").count(), 2);
        assert!(lines.contains("cubic &lt;a&amp;b&gt;"));
        let scatter = xy_chart("tput vs delay", "delay (ms)", "Gbit/s", &series, false);
        well_formed(&scatter).expect("well-formed");
        assert_eq!(scatter.matches("<circle").count(), 4);
        well_formed(&xy_chart("empty", "x", "y", &[], true)).expect("an empty chart too");
    }

    #[test]
    fn checker_rejects_broken_documents() {
        let p = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>";
        assert!(well_formed(&format!("{p}<svg><g></svg></g>")).is_err());
        assert!(well_formed(&format!("{p}<svg>a & b</svg>")).is_err());
        assert!(well_formed(&format!("{p}<svg><text>x</svg>")).is_err());
        assert!(well_formed(&format!("{p}<svg x=\"1></svg>")).is_err());
        assert!(well_formed(&format!("{p}<svg><rect/></svg>")).is_ok());
    }

    #[test]
    fn charts_are_well_formed_and_show_every_row() {
        let mut r = sample();
        r.rows[0].key = "a<b & \"c\"".into();
        for doc in [goodput_chart(&r), latency_cdf_chart(&r)] {
            well_formed(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        }
        let g = goodput_chart(&r);
        assert!(g.contains("a&lt;b &amp; &quot;c&quot;"));
        assert!(g.contains("zs-zs-tcp/1500/rtc"));
        assert!(g.contains("n/a (not available)"));
        assert_eq!(g.matches("<rect").count(), 1 + 2, "background + two bars");
        let l = latency_cdf_chart(&r);
        assert_eq!(l.matches("<polyline").count(), 2);
    }

    #[test]
    fn empty_report_still_gives_valid_charts() {
        let mut r = sample();
        r.rows.clear();
        for doc in [goodput_chart(&r), latency_cdf_chart(&r)] {
            well_formed(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        }
    }

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_max(7.3), 10.0);
        assert_eq!(nice_max(1.7), 2.0);
        assert_eq!(nice_max(23.0), 25.0);
        assert_eq!(nice_max(0.0), 1.0);
    }
}
