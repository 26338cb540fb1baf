-- tool: analyst SQL (psql), a monthly series with its running total and month-over-month change
-- source: issue 33 ("cumulative SUM(COUNT(*)) OVER (ORDER BY month)", "LAG(COUNT(*)) OVER (ORDER BY month)")
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT date_trunc('month', visited_at) AS month, COUNT(*) AS visits, SUM(COUNT(*)) OVER (ORDER BY date_trunc('month', visited_at)) AS running, COUNT(*) - LAG(COUNT(*)) OVER (ORDER BY date_trunc('month', visited_at)) AS change FROM visits GROUP BY 1 ORDER BY 1
