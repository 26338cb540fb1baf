-- tool: Metabase, query builder: Count by Age: 5 bins auto
-- chart: histogram (binned aggregate)
-- keys: 1
-- why: Metabase's binning with width 5 from a min of 15
-- expect: answered
SELECT ((floor((("public"."people"."age" - 15.0) / 5.0))) * 5.0) + 15.0 AS "age", COUNT(*) AS "count" FROM "public"."people" GROUP BY ((floor((("public"."people"."age" - 15.0) / 5.0))) * 5.0) + 15.0 ORDER BY ((floor((("public"."people"."age" - 15.0) / 5.0))) * 5.0) + 15.0 ASC
