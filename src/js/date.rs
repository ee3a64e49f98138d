//! JavaScript `Date`: `+new Date(text)` for the ISO forms and `toISOString()`, as the date-based
//! scorers read and print `next_reboot`/`last_boot`.

/// A week in milliseconds.
pub const WEEK_MS: f64 = 7.0 * 24.0 * 60.0 * 60.0 * 1000.0;

/// The largest absolute time value a JS `Date` can hold, in milliseconds.
const MAX_TIME_MS: f64 = 8.64e15;

/// Days since 1970-01-01 of a proleptic Gregorian date; `month`/`day` may overflow forward
/// (day 31 of February is 2 or 3 March, as JS computes it).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468 + (day - 1)
}

/// The calendar date of a day number (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Reads exactly `len` ASCII digits.
fn digits(s: &[u8], len: usize) -> Option<(i64, &[u8])> {
    if s.len() < len || !s[..len].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = s[..len].iter().fold(0i64, |v, d| v * 10 + i64::from(d - b'0'));
    Some((value, &s[len..]))
}

/// Reads `sep` followed by two digits, if `s` starts with `sep`.
fn part(s: &[u8], sep: u8) -> Option<Option<(i64, &[u8])>> {
    match s.first() {
        Some(&c) if c == sep => Some(digits(&s[1..], 2)),
        _ => None,
    }
}

/// `+new Date(text)` for the ISO forms JS dates are written in: `YYYY`, `YYYY-MM`,
/// `YYYY-MM-DD` (or a signed six-digit year), optionally followed by `THH:MM`, `:SS`,
/// `.fraction` and `Z` or `±HH:MM`. Ranges follow the JS engine (day 1–31 overflowing into
/// the next month, hour 24 only as `24:00:00`). A date-time without an offset is read as UTC
/// (the original reads it in the process's time zone; Triton nodes run UTC). Anything else,
/// and times a JS `Date` cannot hold, give `None`.
pub fn parse_js_date(text: &str) -> Option<f64> {
    let s = text.as_bytes();
    let (year, mut s) = match s.first() {
        Some(&sign @ (b'+' | b'-')) => {
            let (y, rest) = digits(&s[1..], 6)?;
            if sign == b'-' && y == 0 {
                return None;
            }
            (if sign == b'-' { -y } else { y }, rest)
        }
        _ => digits(s, 4)?,
    };
    let (mut month, mut day) = (1, 1);
    if let Some(m) = part(s, b'-') {
        let (m, rest) = m?;
        month = m;
        s = rest;
        if let Some(d) = part(s, b'-') {
            let (d, rest) = d?;
            day = d;
            s = rest;
        }
    }
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let (mut hour, mut minute, mut second, mut millis, mut offset_min) = (0, 0, 0, 0, 0);
    if s.first() == Some(&b'T') {
        let (h, rest) = digits(&s[1..], 2)?;
        let (m, rest) = part(rest, b':')??;
        (hour, minute, s) = (h, m, rest);
        if let Some(sec) = part(s, b':') {
            let (sec, rest) = sec?;
            (second, s) = (sec, rest);
            if s.first() == Some(&b'.') {
                let count = s[1..].iter().take_while(|c| c.is_ascii_digit()).count();
                if count == 0 {
                    return None;
                }
                // Milliseconds are the first three fraction digits; the rest is dropped.
                millis = (0..3).fold(0, |v, i| v * 10 + if i < count { i64::from(s[1 + i] - b'0') } else { 0 });
                s = &s[1 + count..];
            }
        }
        let valid_time = hour < 24 && minute < 60 && second < 60;
        let midnight_24 = hour == 24 && minute == 0 && second == 0 && millis == 0;
        if !valid_time && !midnight_24 {
            return None;
        }
        match s.first() {
            Some(b'Z') => s = &s[1..],
            Some(&sign @ (b'+' | b'-')) => {
                let (oh, rest) = digits(&s[1..], 2)?;
                let (om, rest) = part(rest, b':')??;
                if oh > 23 || om > 59 {
                    return None;
                }
                offset_min = (oh * 60 + om) * if sign == b'-' { -1 } else { 1 };
                s = rest;
            }
            _ => {}
        }
    }
    if !s.is_empty() {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let ms =
        days as f64 * 86_400_000.0 + ((hour * 60 + minute - offset_min) * 60 + second) as f64 * 1000.0 + millis as f64;
    (ms.abs() <= MAX_TIME_MS).then_some(ms)
}

/// `new Date(ms).toISOString()`: `YYYY-MM-DDTHH:MM:SS.sssZ`, years outside 0–9999 as a
/// signed six-digit year. `None` where JS throws (a time a `Date` cannot hold).
pub fn to_iso_string(ms: f64) -> Option<String> {
    if !ms.is_finite() || ms.abs() > MAX_TIME_MS {
        return None;
    }
    // Whole milliseconds: a Date truncates its time value.
    let ms = ms.trunc() as i64;
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let year_text = if (0..=9999).contains(&year) {
        format!("{year:04}")
    } else {
        format!("{}{:06}", if year < 0 { '-' } else { '+' }, year.abs())
    };
    Some(format!(
        "{year_text}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_parse_like_js() {
        assert_eq!(parse_js_date("1970-01-01T00:00:00.000Z"), Some(0.0));
        assert_eq!(parse_js_date("2016-03-05T08:33:38Z"), Some(1_457_166_818_000.0));
        assert_eq!(parse_js_date("2016-03-05T08:33:38.1234Z"), Some(1_457_166_818_123.0));
        assert_eq!(parse_js_date("2016-03-05T08:33:38.5Z"), Some(1_457_166_818_500.0));
        assert_eq!(parse_js_date("2016-03-05T09:33:38+01:00"), Some(1_457_166_818_000.0));
        assert_eq!(parse_js_date("2016-03-05"), Some(1_457_136_000_000.0));
        assert_eq!(parse_js_date("2015-02-30T00:00:00Z"), parse_js_date("2015-03-02T00:00:00Z"));
        assert_eq!(parse_js_date("2015-01-01T24:00:00Z"), parse_js_date("2015-01-02T00:00:00Z"));
        assert_eq!(parse_js_date("-000001-01-01T00:00:00Z"), Some(-62_198_755_200_000.0));
        for bad in [
            "",
            "x",
            "2016-13-01",
            "2016-01-32",
            "2016-01-01T25:00Z",
            "2016-01-01T00:60Z",
            "2016-01-01T",
            "2016-01-01Z",
            "-000000-01-01",
            "2016-01-01T00:00:00.Z",
            "+275761-01-01",
        ] {
            assert_eq!(parse_js_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn iso_strings_format_like_js() {
        assert_eq!(to_iso_string(0.0).as_deref(), Some("1970-01-01T00:00:00.000Z"));
        assert_eq!(to_iso_string(-WEEK_MS).as_deref(), Some("1969-12-25T00:00:00.000Z"));
        assert_eq!(to_iso_string(1_457_166_818_123.0).as_deref(), Some("2016-03-05T08:33:38.123Z"));
        assert_eq!(to_iso_string(-62_198_755_200_000.0).as_deref(), Some("-000001-01-01T00:00:00.000Z"));
        assert_eq!(to_iso_string(253_402_300_800_000.0).as_deref(), Some("+010000-01-01T00:00:00.000Z"));
        assert_eq!(to_iso_string(8.64e15 + 1.0), None);
        assert_eq!(to_iso_string(f64::NAN), None);
        for text in ["2000-02-29T23:59:59.999Z", "1600-03-01T00:00:00.000Z", "0000-01-01T00:00:00.000Z"] {
            assert_eq!(parse_js_date(text).and_then(to_iso_string).as_deref(), Some(text));
        }
    }
}
