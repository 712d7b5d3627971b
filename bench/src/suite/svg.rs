//! Charts for `--plot DIR`, drawn with `plotters`' SVG backend: goodput
//! per row (median bar, min–max whisker) and the ping-pong latency CDF
//! (log-scaled µs), each with the attached section's rows after the
//! scenarios' when the report has it; and, for `cc-lab`, series over
//! linear axes, as lines or as points. Text is laid out with plotters'
//! built-in estimate (no system fonts); the viewer renders it in its
//! sans-serif.

use std::error::Error;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::{AttachedMode, AttachedRow, Report, Status};
use super::scenario::Scenario;
use super::stats::Summary;

const PALETTE: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x17, 0xbe, 0xcf),
];
const GREY: RGBColor = RGBColor(0x88, 0x88, 0x88);
const FONT: &str = "sans-serif";
/// Label and title sizes as plotters takes them (it writes `size / 1.24`
/// px into the SVG: 12 px and 15 px).
const LABEL: f64 = 15.0;
const TITLE: f64 = 18.6;
const PROLOG: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";

type Drawn = Result<(), Box<dyn Error>>;
type Area<'a, 'b> = DrawingArea<SVGBackend<'a>, Shift>;

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A `w`×`h` SVG document on a white background with what `draw` draws;
/// if plotters fails (it cannot on a string, short of a bad range), a
/// document that says so, so a plot never stops a run.
fn document(w: u32, h: u32, draw: impl FnOnce(&Area<'_, '_>) -> Drawn) -> String {
    let mut body = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut body, (w, h)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(Box::<dyn Error>::from)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(Box::<dyn Error>::from))
    };
    match drawn {
        Ok(()) => format!("{PROLOG}{body}"),
        Err(e) => {
            log::warn!("chart not drawn: {e}");
            let mut out = String::new();
            let note = document_note(&mut out, w, h, &format!("chart not drawn: {e}"));
            match note {
                Ok(()) => format!("{PROLOG}{out}"),
                Err(_) => format!("{PROLOG}<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n"),
            }
        }
    }
}

/// A document holding only `text`, centred.
fn document_note(out: &mut String, w: u32, h: u32, text: &str) -> Drawn {
    let root = SVGBackend::with_string(out, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    note(&root, text)?;
    root.present()?;
    Ok(())
}

/// `text` in grey at the middle of `area`.
fn note(area: &Area<'_, '_>, text: &str) -> Drawn {
    let (w, h) = area.dim_in_pixel();
    let style = (FONT, LABEL)
        .into_font()
        .color(&GREY)
        .pos(Pos::new(HPos::Center, VPos::Center));
    area.draw(&Text::new(text, (w as i32 / 2, h as i32 / 2), style))?;
    Ok(())
}

/// An axis tick as `v` with at most three decimals and no trailing zeros.
fn tick(v: f64) -> String {
    format!("{v:.3}")
        .trim_end_matches('0')
        .trim_end_matches('.')
        .to_owned()
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

/// The attached section's rows, each with its label (`zs-linux/1500
/// attached`), in the section's order; none when the report has no
/// section.
fn attached_rows(report: &Report) -> impl Iterator<Item = (String, &AttachedRow)> {
    report
        .attached
        .iter()
        .flat_map(|a| a.rows.iter())
        .map(|r| (format!("{}/{} {}", r.scenario, r.mtu, r.mode().label()), r))
}

/// One bar of [`goodput_chart`].
struct Bar {
    label: String,
    scenario: Scenario,
    goodput: Option<Summary>,
    /// Shown instead of a bar when there is no figure.
    missing: &'static str,
}

/// The report's rows, then the attached section's.
fn bars(report: &Report) -> Vec<Bar> {
    let rows = report.rows.iter().map(|r| Bar {
        label: r.key.clone(),
        scenario: r.scenario,
        goodput: r.goodput_gbps,
        missing: match r.status {
            Status::Unavailable => "n/a (not available)",
            _ => "failed",
        },
    });
    let attached = attached_rows(report).map(|(label, r)| Bar {
        label,
        scenario: r.scenario,
        goodput: r.goodput_gbps,
        missing: if r.notes.is_empty() {
            "not measured"
        } else {
            "failed"
        },
    });
    rows.chain(attached).collect()
}

/// Goodput per row, then per row of the attached section: a bar at the
/// median, a whisker from min to max; rows without a figure are labelled
/// with their status.
pub fn goodput_chart(report: &Report) -> String {
    let rows = bars(report);
    let n = rows.len();
    let h = 40 + 40 + 22 * n.max(1) as u32;
    let max = rows
        .iter()
        .filter_map(|r| r.goodput.map(|g| g.max))
        .fold(0.0, f64::max);
    let axis = nice_max(max);
    // Wide enough for the longest label (plotters' estimate is about 7 px
    // a character at this size).
    let widest = rows.iter().map(|r| r.label.chars().count()).max();
    let label_area = widest.map_or(220, |c| (c as u32 * 7 + 20).clamp(220, 400));
    // Row i sits in segment n-1-i, so the first row is on top.
    let row_of = |k: usize| n.checked_sub(k + 1).and_then(|i| rows.get(i));
    document(900, h, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(
                "Goodput per scenario (Gbit/s, median with min–max)",
                (FONT, TITLE),
            )
            .margin(10)
            .margin_right(40)
            .x_label_area_size(24)
            .y_label_area_size(label_area)
            .build_cartesian_2d(0.0..axis, (0..n.max(1)).into_segmented())?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_labels(6)
            .y_labels(n.max(1))
            .x_label_formatter(&|v| format!("{v:.1}"))
            .y_label_formatter(&|v| match v {
                SegmentValue::CenterOf(k) => {
                    row_of(*k).map(|r| r.label.clone()).unwrap_or_default()
                }
                _ => String::new(),
            })
            .label_style((FONT, LABEL))
            .draw()?;
        let label = |color: &RGBColor| {
            (FONT, LABEL)
                .into_font()
                .color(color)
                .pos(Pos::new(HPos::Left, VPos::Center))
        };
        for (i, r) in rows.iter().enumerate() {
            let seg = n - 1 - i;
            let mid = || SegmentValue::CenterOf(seg);
            match r.goodput {
                Some(g) => {
                    let mut bar = Rectangle::new(
                        [
                            (0.0, SegmentValue::Exact(seg)),
                            (g.median, SegmentValue::Exact(seg + 1)),
                        ],
                        color(r.scenario as usize).filled(),
                    );
                    bar.set_margin(3, 3, 0, 0);
                    chart.draw_series(std::iter::once(bar))?;
                    let whisker = PathElement::new(vec![(g.min, mid()), (g.max, mid())], BLACK);
                    let end = |x: f64| {
                        EmptyElement::at((x, mid()))
                            + PathElement::new(vec![(0, -5), (0, 5)], BLACK)
                    };
                    chart.draw_series(std::iter::once(whisker))?;
                    chart.draw_series([end(g.min), end(g.max)])?;
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((g.max, mid()))
                            + Text::new(format!("{:.2}", g.median), (4, 0), label(&BLACK)),
                    ))?;
                }
                None => {
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((0.0, mid())) + Text::new(r.missing, (4, 0), label(&GREY)),
                    ))?;
                }
            }
        }
        Ok(())
    })
}

/// A legend swatch: a short bar in the series' colour.
fn swatch(c: RGBColor) -> impl Fn((i32, i32)) -> Rectangle<(i32, i32)> {
    move |(x, y)| Rectangle::new([(x, y - 2), (x + 14, y + 2)], c.filled())
}

/// One attached row on the latency chart: its label, its mode and its
/// marks as (µs, quantile).
type Marks = (String, AttachedMode, Vec<(f64, f64)>);

/// Ping-pong round-trip latency CDF, one line per row that has one; the x
/// axis is logarithmic in µs.
///
/// The attached section keeps no CDF (its rows have only the medians over
/// rounds of each round's p50 and p99), so each of its rows is two marks
/// at those quantiles, (p50, 0.5) and (p99, 0.99) ([`draw_mark`]), named
/// in a column beside the plot.
pub fn latency_cdf_chart(report: &Report) -> String {
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
    let marks: Vec<Marks> = attached_rows(report)
        .map(|(name, r)| {
            let at: Vec<(f64, f64)> = [(r.p50_us, 0.5), (r.p99_us, 0.99)]
                .into_iter()
                .filter_map(|(s, q)| s.map(|s| (s.median, q)))
                .filter(|&(us, _)| us.is_finite() && us > 0.0)
                .collect();
            (name, r.mode(), at)
        })
        .filter(|(_, _, at)| !at.is_empty())
        .collect();
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    let cdf_points = series.iter().flat_map(|(_, c)| c.iter().map(|&(_, us)| us));
    let mark_points = marks
        .iter()
        .flat_map(|(_, _, at)| at.iter().map(|&(us, _)| us));
    for us in cdf_points.chain(mark_points) {
        if us > 0.0 {
            lo = lo.min(us);
            hi = hi.max(us);
        }
    }
    if !lo.is_finite() {
        (lo, hi) = (1.0, 10.0);
    }
    let (dlo, dhi) = (
        lo.log10().floor(),
        hi.log10().ceil().max(lo.log10().floor() + 1.0),
    );
    let (xlo, xhi) = (10f64.powf(dlo), 10f64.powf(dhi));
    // With marks, the legend goes to a column of its own on the right: in
    // the plot it would hide marks, which sit on the curves' left at p99
    // and right at p50.
    let (width, side) = if marks.is_empty() {
        (900, 0)
    } else {
        (900 + 340, 340)
    };
    let entries = series.len() + marks.len();
    let height = if marks.is_empty() {
        520
    } else {
        520.max(50 + 19 * entries as u32)
    };
    let caption = if marks.is_empty() {
        "64 B ping-pong round-trip latency CDF"
    } else {
        "64 B ping-pong round-trip latency CDF; marks: attached section p50, p99"
    };
    document(width, height, |root| {
        let (plot, legend) = root.split_horizontally(width - side);
        let mut chart = ChartBuilder::on(&plot)
            .caption(caption, (FONT, TITLE))
            .margin(10)
            .margin_right(20)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((xlo..xhi).log_scale(), 0.0..1.0)?;
        chart
            .configure_mesh()
            .x_desc("round trip (µs, log scale)")
            .x_label_formatter(&|v| format!("{} µs", tick(*v)))
            .y_label_formatter(&|v| tick(*v))
            .label_style((FONT, LABEL))
            .draw()?;
        for (i, (name, cdf)) in series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(
                    cdf.iter()
                        .map(|&(q, us)| (us.clamp(xlo, xhi), q.clamp(0.0, 1.0))),
                    c.stroke_width(2),
                ))?
                .label(*name)
                .legend(swatch(c));
        }
        for (j, (_, mode, at)) in marks.iter().enumerate() {
            for &(us, q) in at {
                draw_mark(
                    chart.plotting_area(),
                    *mode,
                    color(series.len() + j),
                    (us.clamp(xlo, xhi), q),
                )?;
            }
        }
        if series.is_empty() && marks.is_empty() {
            note(root, "no latency measured")?;
        } else if marks.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::LowerRight)
                .background_style(WHITE.mix(0.8))
                .label_font((FONT, LABEL))
                .draw()?;
        } else {
            let text = (FONT, LABEL)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center));
            let y = |k: usize| 50 + 19 * k as i32;
            for (i, (name, _)) in series.iter().enumerate() {
                legend.draw(&swatch(color(i))((0, y(i))))?;
                legend.draw(&Text::new(name.to_string(), (22, y(i)), text.clone()))?;
            }
            for (j, (name, mode, _)) in marks.iter().enumerate() {
                let k = series.len() + j;
                draw_mark(&legend, *mode, color(k), (7, y(k)))?;
                legend.draw(&Text::new(
                    format!("{name} p50, p99"),
                    (22, y(k)),
                    text.clone(),
                ))?;
            }
        }
        Ok(())
    })
}

/// One mark of the attached section at `at`: a triangle attached, a disc
/// in-process, a ring in-process with a spinner.
fn draw_mark<C: CoordTranslate>(
    area: &DrawingArea<SVGBackend<'_>, C>,
    mode: AttachedMode,
    c: RGBColor,
    at: C::From,
) -> Drawn {
    match mode {
        AttachedMode::Attached => area.draw(&TriangleMarker::new(at, 6, c.filled()))?,
        AttachedMode::InProcess => area.draw(&Circle::new(at, 5, c.filled()))?,
        AttachedMode::InProcessSpinner => area.draw(&Circle::new(at, 5, c.stroke_width(2)))?,
    }
    Ok(())
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
    let all = || series.iter().flat_map(|(_, p)| p.iter());
    let xmax = nice_max(all().map(|p| p.0).fold(0.0, f64::max));
    let ymax = nice_max(all().map(|p| p.1).fold(0.0, f64::max));
    document(900, 520, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, (FONT, TITLE))
            .margin(10)
            .margin_right(20)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
        chart
            .configure_mesh()
            .x_labels(5)
            .y_labels(5)
            .x_desc(x_label)
            .y_desc(y_label)
            .x_label_formatter(&|v| tick(*v))
            .y_label_formatter(&|v| tick(*v))
            .label_style((FONT, LABEL))
            .draw()?;
        for (i, (name, points)) in series.iter().enumerate() {
            let c = color(i);
            let drawn = if lines {
                chart.draw_series(LineSeries::new(points.iter().copied(), c.stroke_width(2)))?
            } else {
                let text = (FONT, LABEL).into_font();
                chart.draw_series(points.iter().map(|&p| {
                    EmptyElement::at(p)
                        + Circle::new((0, 0), 5, c.filled())
                        + Text::new(name.clone(), (7, -12), text.clone())
                }))?
            };
            drawn.label(name.as_str()).legend(swatch(c));
        }
        if !series.is_empty() {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperRight)
                .background_style(WHITE.mix(0.8))
                .label_font((FONT, LABEL))
                .draw()?;
        }
        Ok(())
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::report::tests::sample;
    use super::super::report::AttachedSection;
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

    /// The data lines of a chart (plotters draws grid lines as polylines
    /// too, one pixel wide; a series is two).
    fn series_lines(doc: &str) -> usize {
        doc.lines()
            .filter(|l| l.starts_with("<polyline") && l.contains("stroke-width=\"2\""))
            .count()
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
        assert_eq!(series_lines(&lines), 2);
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
        assert_eq!(series_lines(&l), 2);
    }

    #[test]
    fn empty_report_still_gives_valid_charts() {
        let mut r = sample();
        r.rows.clear();
        for doc in [goodput_chart(&r), latency_cdf_chart(&r)] {
            well_formed(&doc).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        }
    }

    /// An attached section at 1500: both directions in all three modes,
    /// the in-process zs-linux row failed (no figures), the attached
    /// linux-zs p99 far beyond every CDF.
    fn attached() -> AttachedSection {
        let s = |v: f64| Summary::of(&[v * 0.9, v, v * 1.1]);
        let row = |scenario, mode: AttachedMode, gbps: f64, p50: f64| AttachedRow {
            scenario,
            mtu: 1500,
            attached: mode == AttachedMode::Attached,
            spinner: mode == AttachedMode::InProcessSpinner,
            goodput_gbps: s(gbps),
            p50_us: s(p50),
            p99_us: s(p50 * 3.0),
            cpu_s_per_gb: None,
            daemon_cpu_s_per_gb: None,
            copies_per_byte: None,
            notes: Vec::new(),
        };
        let mut rows = Vec::new();
        for sc in [Scenario::ZsLinux, Scenario::LinuxZs] {
            for (mode, gbps, p50) in [
                (AttachedMode::InProcess, 8.0, 15.0),
                (AttachedMode::Attached, 7.0, 19.0),
                (AttachedMode::InProcessSpinner, 7.5, 16.0),
            ] {
                rows.push(row(sc, mode, gbps, p50));
            }
        }
        rows[0].goodput_gbps = None;
        rows[0].p50_us = None;
        rows[0].p99_us = None;
        rows[0].notes.push("bench-peer exited".into());
        rows[4].p99_us = s(5000.0);
        AttachedSection {
            rows,
            handover: None,
            load_1min: None,
            app_poll: None,
        }
    }

    /// Whether `doc` has a text element reading exactly `t` (plotters
    /// writes each text on a line of its own).
    fn text(doc: &str, t: &str) -> bool {
        doc.lines().any(|l| l == t)
    }

    #[test]
    fn charts_show_the_attached_rows_when_the_report_has_them() {
        let mut r = sample();
        r.attached = Some(attached());
        let g = goodput_chart(&r);
        well_formed(&g).unwrap_or_else(|e| panic!("{e}\n{g}"));
        for label in [
            "zs-linux/1500 in-process",
            "zs-linux/1500 attached",
            "zs-linux/1500 in-process+spinner",
            "linux-zs/1500 in-process",
            "linux-zs/1500 attached",
            "linux-zs/1500 in-process+spinner",
        ] {
            assert!(text(&g, label), "no {label:?} in\n{g}");
        }
        // Background, the two scenario bars, five attached bars; the
        // failed row says so.
        assert_eq!(g.matches("<rect").count(), 1 + 2 + 5);
        assert!(text(&g, "failed"), "{g}");
        assert!(text(&g, "7.00") && text(&g, "7.50"));

        let l = latency_cdf_chart(&r);
        well_formed(&l).unwrap_or_else(|e| panic!("{e}\n{l}"));
        // Still the two CDF lines; marks: two per row with figures plus
        // one in the legend: 3 circle rows (one failed), 2 triangle rows.
        assert_eq!(series_lines(&l), 2);
        assert_eq!(l.matches("<circle").count(), 3 * 3);
        assert_eq!(l.matches("<polygon").count(), 2 * 3);
        assert!(text(&l, "linux-zs/1500 attached p50, p99"), "{l}");
        assert!(
            !l.contains("zs-linux/1500 in-process p50"),
            "a failed row has no marks"
        );
        assert!(
            text(&l, "10000 µs"),
            "the axis reaches the 5000 µs p99: {l}"
        );
    }

    #[test]
    fn charts_without_an_attached_section_are_unchanged() {
        let r = sample();
        assert!(r.attached.is_none());
        let (g, l) = (goodput_chart(&r), latency_cdf_chart(&r));
        for doc in [&g, &l] {
            assert!(!doc.contains("attached") && !doc.contains("in-process"));
            assert_eq!(doc.matches("<circle").count(), 0);
            assert_eq!(doc.matches("<polygon").count(), 0);
        }
        assert_eq!(g.matches("<rect").count(), 1 + 2);
        let mut empty = sample();
        empty.attached = Some(AttachedSection {
            rows: Vec::new(),
            ..attached()
        });
        assert_eq!(goodput_chart(&empty), g);
        assert_eq!(latency_cdf_chart(&empty), l);
    }

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_max(7.3), 10.0);
        assert_eq!(nice_max(1.7), 2.0);
        assert_eq!(nice_max(23.0), 25.0);
        assert_eq!(nice_max(0.0), 1.0);
    }
}
