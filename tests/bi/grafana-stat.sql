-- tool: Grafana, PostgreSQL data source, visual query builder (a Stat panel, one number):
--   aggregation COUNT(*), no group, the builder's default limit 50
-- source: as grafana-bar-chart.sql
-- identifiers: the demo's people
-- expect: answered
SELECT COUNT(*) FROM people LIMIT 50 
