-- tool: Grafana, PostgreSQL data source, code editor (a Time series panel), the example of Grafana's
--   docs (docs/sources/datasources/postgres/query-editor: $__timeGroupAlias, $__timeFilter, GROUP BY
--   time) with the macros as Grafana expands them before sending (pkg/tsdb/grafana-postgresql-datasource
--   macros.go: floor(extract(epoch from col)/86400)*86400 AS "time"; col BETWEEN 'from' AND 'to')
-- identifiers: the demo's visits.visited_at and cost, a 1-day interval, a dashboard range in 2024
-- expect: answered
SELECT
  floor(extract(epoch from "visited_at")/86400)*86400 AS "time",
  avg("cost"),
  'avg' as metric
FROM visits
WHERE "visited_at" BETWEEN '2024-01-01T00:00:00Z' AND '2024-03-31T23:59:59Z'
GROUP BY time
ORDER BY time
