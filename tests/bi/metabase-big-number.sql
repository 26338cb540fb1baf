-- tool: Metabase, query builder on PostgreSQL ("Count of rows", no breakout: a Number/Trend card)
-- source: as metabase-bar-chart.sql, without the breakout
-- identifiers: the demo's people
-- expect: answered
SELECT COUNT(*) AS "count" FROM "public"."people"
