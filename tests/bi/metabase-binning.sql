-- tool: Metabase, query builder on PostgreSQL ("Count of rows by Age: 10 bins")
-- source: Metabase's binning strategy writes floor((x - min) / width) * width + min (issue 33)
-- identifiers: the demo's people.age
-- expect: answered
SELECT ((floor((("public"."people"."age" - 10.0) / 10.0))) * 10.0) + 10.0 AS "age", COUNT(*) AS "count" FROM "public"."people" GROUP BY ((floor((("public"."people"."age" - 10.0) / 10.0))) * 10.0) + 10.0 ORDER BY ((floor((("public"."people"."age" - 10.0) / 10.0))) * 10.0) + 10.0 ASC
