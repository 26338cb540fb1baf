-- tool: Metabase, query builder on PostgreSQL ("Average of Income", a Number card)
-- source: as metabase-bar-chart.sql; Metabase names the aggregate column "avg"
-- identifiers: the demo's people.income
-- expect: answered
SELECT AVG("public"."people"."income") AS "avg" FROM "public"."people"
