package httpcrypt

import (
	"net/http"
	"strings"
	"time"
)

// DefaultWindow is the freshness window W in seconds (spec §8.1).
const DefaultWindow = 60

// FormatDate writes unix seconds as an IMF-fixdate.
func FormatDate(unix int64) string {
	return time.Unix(unix, 0).UTC().Format(http.TimeFormat)
}

// ParseDate parses an HTTP-date in any of the three forms, ignoring
// surrounding whitespace (bad_date otherwise).
func ParseDate(v string) (int64, error) {
	t, err := http.ParseTime(strings.TrimSpace(v))
	if err != nil || t.Unix() < 0 {
		return 0, ErrBadDate
	}
	return t.Unix(), nil
}

// CheckDate is the server's freshness check: a missing Date is stale, an
// unparseable one bad_date, |date - now| > window stale.
func CheckDate(v *string, now, window int64) (int64, error) {
	if v == nil {
		return 0, ErrStale
	}
	d, err := ParseDate(*v)
	if err != nil {
		return 0, err
	}
	return checkWindow(d, now, window)
}

// checkWindow is the freshness rule of both request profiles: a request
// time t passes when |t - now| <= window, else stale.
func checkWindow(t, now, window int64) (int64, error) {
	diff := t - now
	if diff < 0 {
		diff = -diff
	}
	if diff > window {
		return 0, ErrStale
	}
	return t, nil
}
