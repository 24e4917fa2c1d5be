package benchwork

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scrape holds the samples of Prometheus text-format /metrics answers,
// summed: under the metric name (over all its series), under Key(name,
// label, value) for each label of a series, and, for a histogram's
// _bucket series, under BucketKey(metric, stage, le). Scrapes taken
// before and after a run give the run's counts by difference.
type Scrape map[string]float64

// Key names a series: the metric and one label's value.
func Key(metric, label, value string) string { return metric + "|" + label + "=" + value }

// BucketKey names the cumulative count of histogram metric's bucket le,
// for the series with that stage label ("": none), summed over the other
// labels.
func BucketKey(metric, stage, le string) string {
	return metric + "_bucket|stage=" + stage + "|le=" + le
}

// Parse adds the samples of r (Prometheus text format) to s. Lines it
// cannot read are skipped: a scrape is a measurement, not a check.
func (s Scrape) Parse(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		name, labels, _ := strings.Cut(line[:sp], "{")
		labels = strings.TrimSuffix(labels, "}")
		s[name] += v
		s.noteBucket(name, labels, v)
		for _, l := range strings.Split(labels, ",") {
			k, val, ok := strings.Cut(l, "=")
			if ok {
				s[Key(name, k, strings.Trim(val, `"`))] += v
			}
		}
	}
}

// noteBucket adds a _bucket sample of series name{labels} under BucketKey.
func (s Scrape) noteBucket(name, labels string, v float64) {
	metric, ok := strings.CutSuffix(name, "_bucket")
	if !ok {
		return
	}
	var stage, le string
	for _, l := range strings.Split(labels, ",") {
		k, val, _ := strings.Cut(l, "=")
		switch k {
		case "stage":
			stage = strings.Trim(val, `"`)
		case "le":
			le = strings.Trim(val, `"`)
		}
	}
	if le != "" {
		s[BucketKey(metric, stage, le)] += v
	}
}

// MeanMS is the mean of histogram h's observations between scrapes a and
// b, in ms (0 without any): 1000 * Δh_sum / Δh_count.
func MeanMS(a, b Scrape, h string) float64 {
	n := b[h+"_count"] - a[h+"_count"]
	if n <= 0 {
		return 0
	}
	return 1000 * (b[h+"_sum"] - a[h+"_sum"]) / n
}

// LoaderStageSeconds is, per stage of the loader's loop, the seconds
// tributary_loader_stage_seconds_total grew by between scrapes a and b.
func LoaderStageSeconds(a, b Scrape) map[string]float64 {
	out := map[string]float64{}
	for k := range b {
		if st, ok := strings.CutPrefix(k, "tributary_loader_stage_seconds_total|stage="); ok {
			out[st] = b[k] - a[k]
		}
	}
	return out
}

// ScrapeURL GETs url (a /metrics endpoint, within 5 s) and adds its
// samples to s.
func ScrapeURL(ctx context.Context, url string, s Scrape) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return errors.New(resp.Status)
	}
	s.Parse(resp.Body)
	return nil
}
