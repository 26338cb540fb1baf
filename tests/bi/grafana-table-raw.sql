-- tool: Grafana, PostgreSQL data source, visual query builder (a Table panel) with column * and
--   the default limit 50: raw rows
-- source: as grafana-bar-chart.sql
-- identifiers: the demo's people
-- expect: refused 42501
SELECT * FROM people LIMIT 50 
