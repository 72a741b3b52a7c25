//! `strftime_now(format)`: the calendar date and time of a Unix timestamp
//! (UTC) and C's `strftime` directives that chat templates use (`%d %b
//! %Y`, `%Y-%m-%d`, `%B`, `%A`, `%H:%M:%S`, ...).

/// A civil date and time (UTC, proleptic Gregorian).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    /// Year, e.g. 2026.
    pub year: i64,
    /// Month 1..=12.
    pub month: u32,
    /// Day of the month 1..=31.
    pub day: u32,
    /// Hour 0..=23.
    pub hour: u32,
    /// Minute 0..=59.
    pub minute: u32,
    /// Second 0..=59.
    pub second: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

impl DateTime {
    /// The UTC date and time `secs` seconds after 1970-01-01 00:00:00.
    pub fn from_unix(secs: i64) -> DateTime {
        let days = secs.div_euclid(86400);
        let rem = secs.rem_euclid(86400);
        let z = days + 719468;
        let era = z.div_euclid(146097);
        let doe = z - era * 146097;
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        DateTime {
            year,
            month,
            day,
            hour: (rem / 3600) as u32,
            minute: (rem / 60 % 60) as u32,
            second: (rem % 60) as u32,
        }
    }

    /// Now, from the system clock.
    pub fn now() -> DateTime {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        DateTime::from_unix(secs)
    }

    /// Monday = 0 .. Sunday = 6.
    fn weekday(&self) -> usize {
        // 1970-01-01 was a Thursday (3)
        (days_from_civil(self.year, self.month, self.day) + 3).rem_euclid(7) as usize
    }

    fn day_of_year(&self) -> i64 {
        days_from_civil(self.year, self.month, self.day) - days_from_civil(self.year, 1, 1) + 1
    }

    /// Format as C's `strftime` (the C locale); unknown directives are kept
    /// as written, as glibc does.
    pub fn strftime(&self, fmt: &str) -> String {
        let mut out = String::new();
        let mut it = fmt.chars();
        let month = MONTHS[(self.month as usize).clamp(1, 12) - 1];
        let wd = WEEKDAYS[self.weekday()];
        while let Some(c) = it.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            let Some(d) = it.next() else {
                out.push('%');
                break;
            };
            let h12 = match self.hour % 12 {
                0 => 12,
                h => h,
            };
            match d {
                'Y' => out.push_str(&self.year.to_string()),
                'y' => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                'C' => out.push_str(&format!("{:02}", self.year.div_euclid(100))),
                'm' => out.push_str(&format!("{:02}", self.month)),
                'd' => out.push_str(&format!("{:02}", self.day)),
                'e' => out.push_str(&format!("{:2}", self.day)),
                'H' => out.push_str(&format!("{:02}", self.hour)),
                'I' => out.push_str(&format!("{h12:02}")),
                'M' => out.push_str(&format!("{:02}", self.minute)),
                'S' => out.push_str(&format!("{:02}", self.second)),
                'p' => out.push_str(if self.hour < 12 { "AM" } else { "PM" }),
                'B' => out.push_str(month),
                'b' | 'h' => out.push_str(&month[..3]),
                'A' => out.push_str(wd),
                'a' => out.push_str(&wd[..3]),
                'j' => out.push_str(&format!("{:03}", self.day_of_year())),
                'u' => out.push_str(&(self.weekday() + 1).to_string()),
                'w' => out.push_str(&((self.weekday() + 1) % 7).to_string()),
                'F' => out.push_str(&format!("{}-{:02}-{:02}", self.year, self.month, self.day)),
                'D' => out.push_str(&format!(
                    "{:02}/{:02}/{:02}",
                    self.month,
                    self.day,
                    self.year.rem_euclid(100)
                )),
                'T' => out.push_str(&format!(
                    "{:02}:{:02}:{:02}",
                    self.hour, self.minute, self.second
                )),
                'R' => out.push_str(&format!("{:02}:{:02}", self.hour, self.minute)),
                'n' => out.push('\n'),
                't' => out.push('\t'),
                '%' => out.push('%'),
                o => {
                    out.push('%');
                    out.push(o);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calendar() {
        let d = DateTime::from_unix(0);
        assert_eq!((d.year, d.month, d.day, d.weekday()), (1970, 1, 1, 3));
        // 2026-12-01 12:34:56 UTC, a Tuesday
        let d = DateTime::from_unix(1_796_128_496);
        assert_eq!(
            (d.year, d.month, d.day, d.hour, d.minute, d.second),
            (2026, 12, 1, 12, 34, 56)
        );
        assert_eq!(d.strftime("%d %b %Y"), "01 Dec 2026");
        assert_eq!(
            d.strftime("%A %B %e, %F %T %p %j %%"),
            "Tuesday December  1, 2026-12-01 12:34:56 PM 335 %"
        );
        let d = DateTime::from_unix(951_782_400); // 2000-02-29
        assert_eq!((d.year, d.month, d.day), (2000, 2, 29));
        let d = DateTime::from_unix(-1);
        assert_eq!((d.year, d.month, d.day, d.hour), (1969, 12, 31, 23));
    }
}
