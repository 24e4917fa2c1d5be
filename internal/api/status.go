package api

// GET /: the status page, server-rendered HTML for whoever is on call.
//
// It shows nothing the API does not already serve. Freshness, stopped
// tables, anomalies and revenue come from the API's own routes, called
// in-process with the caller's Authorization header, so each section needs
// exactly the scope its route needs and says so when the token lacks it.
// Reader and loader state come from the components' metrics endpoints the
// API is configured with (status_metrics.go). A section whose source fails
// shows the failure; the page itself answers 200 whenever the caller may
// see it.
//
// Auth: with tokens configured the page needs a token (any scope), like
// GET /v1/shards. A browser does not send a bearer token on navigation, so
// the page without one is a 401 with a form; the token goes into the tab's
// sessionStorage and the page's script fetches the page with it. The same
// script refreshes the page every statusRefresh.

import (
	"bytes"
	"cmp"
	_ "embed"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tributary/tributary/internal/query"
)

// DefaultRunbookURL is where the page links the runbook's sections
// (Config.RunbookURL): the repository's docs/runbook.md, relative.
const DefaultRunbookURL = "docs/runbook.md"

// statusRefresh is how often the page reloads its content.
const statusRefresh = 10 * time.Second

// statusListLimit is how many anomalies of each listing the page shows.
const statusListLimit = 20

// revenueChartDays is the revenue chart's window, in days up to today.
const revenueChartDays = 30

//go:embed status.html
var statusHTML string

var statusTemplate = template.Must(template.New("status").Funcs(template.FuncMap{
	"bytes":   humanBytes,
	"percent": func(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) },
	"seconds": func(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) + " s" },
	"count":   func(f float64) string { return strconv.FormatFloat(f, 'f', 0, 64) },
	"time":    func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"runbook": func(base, anchor string) string { return base + "#" + anchor },
}).Parse(statusHTML))

// statusPage is what the template renders.
// GET /v1/status answers the same in JSON, without the page's own fields
// (json:"-") and the revenue chart: tributaryctl status prints it.
type statusPage struct {
	Generated      time.Time `json:"generated"`
	RefreshMS      int64     `json:"-"`
	RefreshSeconds int64     `json:"-"`
	Auth           string    `json:"-"`
	RunbookURL     string    `json:"-"`
	// NeedToken, when set, is why the caller may see nothing (401/403).
	NeedToken *Error `json:"-"`

	Shards     []shardStatus        `json:"shards"`
	ShardsErr  string               `json:"shards_error,omitempty"`
	Stopped    []stoppedTableStatus `json:"stopped_tables"`
	Components componentsView       `json:"components"`
	Anomalies  []anomalySection     `json:"anomalies"`
	Revenue    revenueChart         `json:"-"`
}

// shardStatus is one shard's row: its freshness and its reader's state.
type shardStatus struct {
	Shard     int                   `json:"shard"`
	Freshness *query.ShardFreshness `json:"freshness"`
	Reader    *readerView           `json:"reader"`
}

// anomalySection is one kind of open anomaly.
type anomalySection struct {
	Title   string `json:"title"`
	Listing string `json:"listing"`
	Runbook string `json:"runbook"`
	// Err says why the listing could not be read (no scope, not
	// configured, failure).
	Err   string   `json:"error,omitempty"`
	Items []string `json:"items"`
	More  bool     `json:"more"`
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) error {
	page := statusPage{Generated: time.Now().UTC(), RefreshMS: statusRefresh.Milliseconds(), RefreshSeconds: int64(statusRefresh / time.Second), Auth: "off", RunbookURL: cmp.Or(s.cfg.RunbookURL, DefaultRunbookURL)}
	code := http.StatusOK
	if s.cfg.Tokens != nil {
		name, err := s.cfg.Tokens.authorize(w, r, accessToken, s.cfg.DocumentsTable)
		if apiErr, ok := err.(*Error); ok {
			page.NeedToken, code = apiErr, apiErr.Status
		}
		page.Auth = "token " + name
	}
	if page.NeedToken == nil {
		s.fillStatus(r, &page, true)
	}
	var b bytes.Buffer
	if err := statusTemplate.Execute(&b, page); err != nil {
		return fmt.Errorf("status page: %w", err)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, err := w.Write(b.Bytes())
	return err //nolint:wrapcheck // the client went away
}

// statusJSON is GET /v1/status: the page's sections as JSON.
func (s *Server) statusJSON(w http.ResponseWriter, r *http.Request) error {
	page := statusPage{Generated: time.Now().UTC()}
	s.fillStatus(r, &page, false)
	return writeJSON(w, http.StatusOK, page)
}

// fillStatus reads every section at once (the revenue chart if chart).
func (s *Server) fillStatus(r *http.Request, page *statusPage, chart bool) {
	var (
		wg         sync.WaitGroup
		shards     shardsAnswer
		shardsErr  string
		dups       duplicatesResponse
		dupsErr    string
		moves      moveAnomaliesAnswer
		movesErr   string
		misplaced  misplacedResponse
		misErr     string
		components = componentsView{}
	)
	run := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	run(func() { shardsErr = s.internalGet(r, "/v1/shards", &shards) })
	run(func() {
		dupsErr = s.internalGet(r, "/v1/anomalies/duplicates?state=open&limit="+strconv.Itoa(statusListLimit), &dups)
	})
	run(func() {
		movesErr = s.internalGet(r, "/v1/anomalies/moves?kind=all&limit="+strconv.Itoa(statusListLimit), &moves)
	})
	run(func() {
		misErr = s.internalGet(r, "/v1/anomalies/misplaced?limit="+strconv.Itoa(statusListLimit), &misplaced)
	})
	if chart {
		run(func() { page.Revenue = s.revenueChart(r, page.Generated) })
	}
	if len(s.cfg.ComponentMetrics) > 0 {
		run(func() {
			components = readComponents(scrapeComponents(r.Context(), componentClient, s.cfg.ComponentMetrics))
		})
	}
	wg.Wait()

	page.Components = components
	page.ShardsErr, page.Stopped = shardsErr, shards.Stopped
	page.Shards = shardRows(shards.Shards, components.Readers)
	page.Anomalies = anomalySections(dups, dupsErr, moves, movesErr, misplaced, misErr)
}

// shardsAnswer is GET /v1/shards' answer.
type shardsAnswer struct {
	Shards  []query.ShardFreshness `json:"shards"`
	Stopped []stoppedTableStatus   `json:"stopped_tables"`
}

// moveAnomaliesAnswer is the part of GET /v1/anomalies/moves' answer the
// page shows.
type moveAnomaliesAnswer struct {
	Anomalies []query.MoveAnomaly `json:"anomalies"`
	Next      string              `json:"next_cursor"`
}

// shardRows joins freshness and reader state by shard: every shard either
// knows, in shard order.
func shardRows(fresh []query.ShardFreshness, readers map[int]*readerView) []shardStatus {
	byShard := map[int]*shardStatus{}
	for i := range fresh {
		byShard[fresh[i].Shard] = &shardStatus{Shard: fresh[i].Shard, Freshness: &fresh[i]}
	}
	for id, rv := range readers {
		if byShard[id] == nil {
			byShard[id] = &shardStatus{Shard: id}
		}
		byShard[id].Reader = rv
	}
	out := make([]shardStatus, 0, len(byShard))
	for _, st := range byShard {
		out = append(out, *st)
	}
	slices.SortFunc(out, func(a, b shardStatus) int { return a.Shard - b.Shard })
	return out
}

// anomalySections splits the listings into the page's sections, each with
// its listing and runbook section (docs/runbook.md's alert anchors).
func anomalySections(dups duplicatesResponse, dupsErr string, moves moveAnomaliesAnswer, movesErr string,
	mis misplacedResponse, misErr string) []anomalySection {
	dup := anomalySection{Title: "Duplicate ids", Listing: "/v1/anomalies/duplicates?state=open", Runbook: "tributaryduplicateids", Err: dupsErr}
	serial := anomalySection{Title: "Serial collisions", Listing: "/v1/anomalies/duplicates?state=open", Runbook: "tributaryserialcollisions", Err: dupsErr}
	for _, a := range dups.Anomalies {
		item := fmt.Sprintf("%s id %s on shards %s since %s", a.Table, a.ID, joinShards(a.Shards), a.FirstSeen.UTC().Format(time.RFC3339))
		switch a.Kind {
		case "duplicate":
			dup.Items = append(dup.Items, item)
		case "serial_collision":
			serial.Items = append(serial.Items, item)
		}
	}
	dup.More, serial.More = dups.Next != "", dups.Next != ""
	misplaced := anomalySection{Title: "Misplaced rows", Listing: "/v1/anomalies/misplaced", Runbook: "tributarymisplacedrows", Err: misErr, More: mis.Next != ""}
	for _, m := range mis.Rows {
		misplaced.Items = append(misplaced.Items, fmt.Sprintf("%s id %s on shard %d, owner %d (%s=%s, ring v%d)",
			m.Table, m.ID, m.Shard, m.Owner, m.ShardKey, m.Key, m.RingVersion))
	}
	stuck := anomalySection{Title: "Stuck moves", Listing: "/v1/anomalies/moves?kind=stuck", Runbook: "tributarymovesstuck", Err: movesErr}
	lost := anomalySection{Title: "Lost moves", Listing: "/v1/anomalies/moves?kind=lost", Runbook: "tributarydocumentslostinmoves", Err: movesErr}
	for _, m := range moves.Anomalies {
		item := fmt.Sprintf("document %s, shard %d → %d, %s since %s", m.DocumentID, m.FromShard, m.ToShard, m.State, m.StartedAt.UTC().Format(time.RFC3339))
		switch m.Kind {
		case query.MoveStuck:
			stuck.Items = append(stuck.Items, item)
		case query.MoveLost:
			lost.Items = append(lost.Items, item)
		}
	}
	stuck.More, lost.More = moves.Next != "", moves.Next != ""
	return []anomalySection{dup, serial, misplaced, stuck, lost}
}

func joinShards(shards []uint16) string {
	parts := make([]string, len(shards))
	for i, s := range shards {
		parts[i] = strconv.Itoa(int(s))
	}
	return strings.Join(parts, ", ")
}

// internalGet serves path through the API's own routes with r's
// Authorization header and decodes the JSON answer into v. It returns ""
// or what went wrong, for the page: the route's own message on an error
// answer (a missing scope, a feature not configured, a failure).
func (s *Server) internalGet(r *http.Request, path string, v any) string {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, path, nil)
	if err != nil {
		return err.Error()
	}
	if h := r.Header.Get("Authorization"); h != "" {
		req.Header.Set("Authorization", h)
	}
	rec := &bufferResponse{header: http.Header{}, code: http.StatusOK}
	s.mux.ServeHTTP(rec, req)
	if rec.code != http.StatusOK {
		var e Error
		if json.Unmarshal(rec.body.Bytes(), &e) == nil && e.Message != "" {
			return fmt.Sprintf("%d %s: %s", rec.code, e.Code, e.Message)
		}
		return fmt.Sprintf("%s answered %d", path, rec.code)
	}
	if err := json.Unmarshal(rec.body.Bytes(), v); err != nil {
		return fmt.Sprintf("%s: unreadable answer: %v", path, err)
	}
	return ""
}

// bufferResponse is an http.ResponseWriter into memory, for internalGet.
type bufferResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferResponse) Header() http.Header         { return b.header }
func (b *bufferResponse) WriteHeader(code int)        { b.code = code }
func (b *bufferResponse) Write(p []byte) (int, error) { return b.body.Write(p) }

// revenueChart is the last revenueChartDays days' net revenue per
// currency, drawn as one SVG polyline each.
type revenueChart struct {
	Err     string
	From    string
	To      string
	Lines   []revenueLine
	Max     string
	Width   int
	Height  int
	Days    int
	Listing string
}

// revenueLine is one currency's line.
type revenueLine struct {
	Currency string
	Color    string
	Points   string
	Total    string
	LabelY   int
}

// chartColors are the lines' colors, by currency in name order.
var chartColors = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

func (s *Server) revenueChart(r *http.Request, now time.Time) revenueChart {
	to := now.Truncate(24*time.Hour).AddDate(0, 0, 1)
	from := to.AddDate(0, 0, -revenueChartDays)
	c := revenueChart{From: from.Format("2006-01-02"), To: to.AddDate(0, 0, -1).Format("2006-01-02"), Width: 720, Height: 200, Days: revenueChartDays}
	c.Listing = "/v1/revenue?from=" + from.Format(time.RFC3339) + "&to=" + to.Format(time.RFC3339) + "&group_by=day,currency"
	var ans struct {
		Rows []map[string]any `json:"rows"`
	}
	if c.Err = s.internalGet(r, c.Listing, &ans); c.Err != "" {
		return c
	}
	perCurrency := map[string][]float64{}
	var peak float64
	for _, row := range ans.Rows {
		day, _ := row["day"].(string)
		cur, _ := row["currency"].(string)
		net, _ := row["net"].(string)
		d, err := time.Parse("2006-01-02", day)
		n, nerr := strconv.ParseFloat(net, 64) // for drawing only; the listing has the exact amounts
		if err != nil || nerr != nil {
			continue
		}
		i := int(d.Sub(from) / (24 * time.Hour))
		if i < 0 || i >= revenueChartDays {
			continue
		}
		if perCurrency[cur] == nil {
			perCurrency[cur] = make([]float64, revenueChartDays)
		}
		perCurrency[cur][i] += n
		peak = max(peak, perCurrency[cur][i])
	}
	names := make([]string, 0, len(perCurrency))
	for k := range perCurrency {
		names = append(names, k)
	}
	sort.Strings(names)
	if peak <= 0 {
		peak = 1
	}
	c.Max = strconv.FormatFloat(peak, 'f', 2, 64)
	const left, top, plotH = 60, 10, 170
	plotW := c.Width - left - 80
	for i, name := range names {
		var pts []string
		var total float64
		y := 0
		for d, v := range perCurrency[name] {
			x := left + d*plotW/(revenueChartDays-1)
			y = top + plotH - int(max(v, 0)/peak*plotH)
			pts = append(pts, fmt.Sprintf("%d,%d", x, y))
			total += v
		}
		c.Lines = append(c.Lines, revenueLine{Currency: name, Color: chartColors[i%len(chartColors)], Points: strings.Join(pts, " "),
			Total: strconv.FormatFloat(total, 'f', 2, 64), LabelY: y})
	}
	return c
}

// humanBytes renders a byte count with a binary unit.
func humanBytes(f float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	if i == 0 {
		return strconv.FormatFloat(f, 'f', 0, 64) + " B"
	}
	return strconv.FormatFloat(f, 'f', 1, 64) + " " + units[i]
}
