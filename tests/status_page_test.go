package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tributary/tributary/internal/admin"
	"github.com/tributary/tributary/internal/api"
	"github.com/tributary/tributary/internal/query"
)

// chromiumPath finds Debian's chromium (deploy/local/install.sh installs
// it); the test is skipped without it unless the stack is required.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("TRIBUTARY_REQUIRE_STACK") == "1" {
		t.Fatal("chromium not found: run deploy/local/install.sh")
	}
	t.Skip("chromium not installed")
	return ""
}

// TestStatusPageInChromium runs two shards' readers and a loader, makes
// one id live on both shards and orders in two currencies, and loads the
// status page in headless Chromium: no console errors, every shard
// listed with its reader's state, the duplicate id shown, a failing
// metrics endpoint shown as failed, and the page refreshed by its script.
// Then, with tokens, the token form and what a token without
// documents:read sees.
// TRIBUTARY_STATUS_SCREENSHOT=docs/status-page.png (relative to the
// repository) saves a screenshot.
func TestStatusPageInChromium(t *testing.T) {
	chromium := chromiumPath(t)
	p := setupRevenuePipeline(t, []int{0, 1}, true)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	t.Cleanup(func() { stop(); p.wg.Wait() })

	var endpoints []string
	serve := func(reg *prometheus.Registry) {
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		t.Cleanup(srv.Close)
		endpoints = append(endpoints, srv.URL+"/metrics")
	}
	for _, s := range p.shards {
		serve(p.startMeteredReader(runCtx, s))
	}
	serve(p.startMeteredLoader(runCtx, "l1"))
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	endpoints = append(endpoints, dead.URL+"/metrics")

	// Orders over the last days in two currencies, and one id on both
	// shards.
	tbl := pgx.Identifier{p.table()}.Sanitize()
	insert := "INSERT INTO " + tbl + " (account_id, total, currency_code, state, placed_at) VALUES ($1, $2, $3, 'paid', $4) RETURNING id"
	now := time.Now().UTC()
	var dupID int64
	for i := range 40 {
		cur := []string{"EUR", "USD"}[i%2]
		id, _ := p.writeDoc(ctx, i%2, insert, 10+i%3, fmt.Sprintf("%d.%02d", 50+i*7%90, i), cur, now.AddDate(0, 0, -(i/2)))
		if i == 0 {
			dupID = id
		}
	}
	p.writeDoc(ctx, 1, "INSERT INTO "+tbl+" (id, account_id, total, currency_code, state, placed_at) VALUES ($1, 10, 1.00, 'EUR', 'paid', $2) RETURNING id",
		dupID, now)
	dup := strconv.FormatInt(dupID, 10)

	status := httptest.NewServer(api.New(api.Config{Tables: p.tables, DocumentsTable: p.table(), QueryTimeout: 15 * time.Second,
		ComponentMetrics: endpoints}, query.New(p.store.Conn(), p.chDB), p.log, prometheus.NewRegistry()))
	t.Cleanup(status.Close)
	waitForDuplicate(ctx, t, status.URL, dup)

	// tributaryctl status prints the same sections (GET /v1/status).
	st, _, err := admin.FetchStatus(ctx, http.DefaultClient, status.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := admin.WriteStatus(&text, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"\n0   ", "\n1   ", "streaming", dup, "metrics endpoint " + dead.URL + "/metrics failed: ", "loaders: 1,"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("tributaryctl status lacks %q:\n%s", want, text.String())
		}
	}

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.Flag("disable-quic", true), chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1000))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()

	// Every console call, uncaught exception and browser log entry of
	// level warning or error (a failed load is one) is a problem.
	var (
		mu       sync.Mutex
		problems []string
		drained  = make(chan struct{})
	)
	messages := chromedp.Console(bctx)
	go func() {
		defer close(drained)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				mu.Unlock()
			}
		}
	}()

	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("chromium: %s: %v", what, err)
		}
	}
	step("load", chromedp.Do(bctx, chromedp.Navigate(status.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#shards"))))
	shards, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("tr.shard")).map(e => e.dataset.shard + ": " + e.innerText)`))
	step("shards", err)
	anomalies, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#anomalies")))
	step("anomalies", err)
	endpointsText, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#endpoints")))
	step("endpoints", err)
	chart, err := chromedp.Run(bctx, chromedp.OuterHTML(chromedp.CSS("#revenue-chart")))
	step("chart", err)
	// The script replaces the content every 10 s: wait for one refresh.
	step("refresh", chromedp.Do(bctx, chromedp.WaitVisible(`//span[@id="refresh-state"][starts-with(text(), "refreshed")]`)))
	for _, s := range p.shards {
		found := false
		for _, row := range shards {
			if strings.HasPrefix(row, strconv.Itoa(s)+": ") {
				found = true
				if !strings.Contains(row, "streaming") {
					t.Errorf("shard %d's row does not say its reader is streaming: %q", s, row)
				}
			}
		}
		if !found {
			t.Errorf("shard %d is not on the page (rows %q)", s, shards)
		}
	}
	if !strings.Contains(anomalies, dup) {
		t.Errorf("duplicate id %s is not on the page; anomalies section:\n%s", dup, anomalies)
	}
	if !strings.Contains(endpointsText, dead.URL+"/metrics: failed") {
		t.Errorf("the dead metrics endpoint is not shown as failed:\n%s", endpointsText)
	}
	for _, cur := range []string{"EUR", "USD"} {
		if !strings.Contains(chart, ">"+cur+"<") {
			t.Errorf("the revenue chart has no %s line:\n%s", cur, chart)
		}
	}

	if path := os.Getenv("TRIBUTARY_STATUS_SCREENSHOT"); path != "" {
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		step("screenshot", err)
		if err := os.WriteFile("../"+path, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	for _, pr := range problems {
		t.Errorf("browser: %s", pr)
	}
	problems = nil
	mu.Unlock()

	// With tokens: the page without one is the token form (a 401, which
	// the browser logs); a token entered there shows the page, and its
	// anomaly sections say what the token's scopes do not cover.
	tokens, err := api.ParseTokens("finance:"+apiRevenueToken+":revenue:read", false)
	if err != nil {
		t.Fatal(err)
	}
	guarded := httptest.NewServer(api.New(api.Config{Tables: p.tables, DocumentsTable: p.table(), QueryTimeout: 15 * time.Second,
		Tokens: tokens, ComponentMetrics: endpoints}, query.New(p.store.Conn(), p.chDB), p.log, prometheus.NewRegistry()))
	t.Cleanup(guarded.Close)
	step("token form", chromedp.Do(bctx, chromedp.Navigate(guarded.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token-form")),
		chromedp.SendKeys(chromedp.CSS("#token-input"), apiRevenueToken), chromedp.Click(chromedp.CSS(`#token-form button`)),
		chromedp.WaitVisible(chromedp.CSS("#shards"))))
	guardedAnomalies, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#anomalies")))
	step("anomalies with a revenue token", err)
	if !strings.Contains(guardedAnomalies, `lacks the anomalies:read scope this route needs (documents:read or admin also grant it)`) {
		t.Errorf("with a revenue:read token the anomaly sections do not say they need anomalies:read:\n%s", guardedAnomalies)
	}
	cancelBrowser()
	<-drained
	mu.Lock()
	defer mu.Unlock()
	for _, pr := range problems {
		if !strings.Contains(pr, "401") {
			t.Errorf("browser, with tokens: %s", pr)
		}
	}
}

// waitForDuplicate polls the duplicates listing until id is open there.
func waitForDuplicate(ctx context.Context, t *testing.T, base, id string) {
	t.Helper()
	for {
		status, _, body := apiGet(ctx, t, base, "/v1/anomalies/duplicates?state=open", "")
		var page struct {
			Anomalies []struct {
				ID string `json:"id"`
			} `json:"anomalies"`
		}
		if status == http.StatusOK && json.Unmarshal(body, &page) == nil {
			for _, a := range page.Anomalies {
				if a.ID == id {
					return
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("duplicate %s never listed; last answer %d %s", id, status, body)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
