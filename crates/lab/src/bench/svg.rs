//! Hand-written SVG line plots for `--sweep` (no plotting dependency): y against clients on
//! a logarithmic x axis.

use std::fmt::Write as _;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 400.0;
const MARGIN_LEFT: f64 = 80.0;
const MARGIN_RIGHT: f64 = 20.0;
const MARGIN_TOP: f64 = 40.0;
const MARGIN_BOTTOM: f64 = 50.0;
const Y_TICKS: usize = 5;

/// One plot: `points` are (clients, value); non-finite values and clients < 1 are left out.
pub fn plot(title: &str, y_label: &str, points: &[(f64, f64)]) -> String {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| *x >= 1.0 && y.is_finite())
        .collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="22" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    let (x0, x1) = (MARGIN_LEFT, WIDTH - MARGIN_RIGHT);
    let (y0, y1) = (HEIGHT - MARGIN_BOTTOM, MARGIN_TOP);
    let _ = writeln!(
        s,
        r#"<path d="M{x0},{y1} L{x0},{y0} L{x1},{y0}" stroke="black" fill="none"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">clients (log scale)</text>"#,
        (x0 + x1) / 2.0,
        HEIGHT - 12.0
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{}" text-anchor="middle" transform="rotate(-90 16 {})">{}</text>"#,
        (y0 + y1) / 2.0,
        (y0 + y1) / 2.0,
        escape(y_label)
    );
    if pts.is_empty() {
        s.push_str("</svg>\n");
        return s;
    }
    let lx = |x: f64| x.log10();
    let (mut xmin, mut xmax) = pts.iter().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| {
        (a.min(lx(*x)), b.max(lx(*x)))
    });
    if xmax - xmin < 1e-9 {
        xmin -= 0.5;
        xmax += 0.5;
    }
    // The y axis starts at zero, so a flat line looks flat and a fall looks its size.
    let ymax = pts.iter().fold(0.0_f64, |m, (_, y)| m.max(*y)).max(1e-9) * 1.1;
    let px = |x: f64| x0 + (lx(x) - xmin) / (xmax - xmin) * (x1 - x0);
    let py = |y: f64| y0 - y / ymax * (y0 - y1);
    for i in 0..=Y_TICKS {
        let v = ymax * i as f64 / Y_TICKS as f64;
        let y = py(v);
        let _ = writeln!(
            s,
            r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            x0 - 6.0,
            y + 4.0,
            short(v)
        );
    }
    let mut decade = xmin.floor() as i32;
    while f64::from(decade) <= xmax.ceil() {
        let x = 10_f64.powi(decade);
        if lx(x) >= xmin - 1e-9 && lx(x) <= xmax + 1e-9 {
            let _ = writeln!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                px(x),
                y0 + 18.0,
                short(x)
            );
        }
        decade += 1;
    }
    let path: Vec<String> = pts
        .iter()
        .enumerate()
        .map(|(i, (x, y))| {
            format!(
                "{}{:.1},{:.1}",
                if i == 0 { "M" } else { "L" },
                px(*x),
                py(*y)
            )
        })
        .collect();
    let _ = writeln!(
        s,
        r##"<path d="{}" stroke="#1f77b4" stroke-width="2" fill="none"/>"##,
        path.join(" ")
    );
    for (x, y) in &pts {
        let _ = writeln!(
            s,
            r##"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="#1f77b4"><title>{} clients: {}</title></circle>"##,
            px(*x),
            py(*y),
            x,
            short(*y)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// 1500 -> "1.5k", 0.25 -> "0.25".
fn short(v: f64) -> String {
    if v >= 1e6 {
        let t = format!("{:.2}", v / 1e6);
        format!("{}M", t.trim_end_matches('0').trim_end_matches('.'))
    } else if v >= 1e3 {
        let t = format!("{:.1}", v / 1e3);
        format!("{}k", t.trim_end_matches('0').trim_end_matches('.'))
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plot_is_svg_with_one_marker_per_point() {
        let svg = plot(
            "a < b",
            "Mbit/s",
            &[(100.0, 10.0), (1000.0, 12.0), (0.0, 5.0)],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 2);
        assert!(svg.contains("a &lt; b"));
        assert!(plot("t", "y", &[]).contains("</svg>"));
    }

    #[test]
    fn short_numbers() {
        assert_eq!(short(1500.0), "1.5k");
        assert_eq!(short(100_000.0), "100k");
        assert_eq!(short(42.0), "42");
    }
}
