-- tool: Grafana, PostgreSQL data source, code editor (a Stat panel): $__unixEpochFilter over the
--   epoch of a timestamp column, as Grafana expands it before sending (pkg/tsdb/grafana-postgresql-datasource
--   macros.go: "%s >= %d AND %s <= %d", the argument verbatim and the dashboard range's epoch seconds)
-- identifiers: the demo's visits.visited_at; the range 2023-11-14 22:13:20 to 2024-03-10 01:46:40
-- source: written from macros.go's expansion (Grafana not run); refused until 2026-11-29
--   ("extract/date_part of a time column takes one of year, … got epoch")
-- expect: answered
SELECT COUNT(*) FROM visits WHERE extract(epoch from visited_at) >= 1700000000 AND extract(epoch from visited_at) <= 1710000000
