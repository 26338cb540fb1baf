-- tool: Grafana, PostgreSQL data source, visual query builder (Format: Table, a Bar chart panel):
--   column region, aggregation COUNT(*), group by region, the builder's default limit 50
-- source: grafana/grafana packages/grafana-sql (utils/sql.utils.ts toRawSql: "SELECT … FROM … GROUP BY …
--   LIMIT 50 ", trailing space included)
-- identifiers: the demo's people.region
-- expect: answered
SELECT region, COUNT(*) FROM people GROUP BY region LIMIT 50 
