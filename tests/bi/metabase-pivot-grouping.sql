-- tool: Metabase, pivot table on PostgreSQL (a Sex x Region pivot's per-row query)
-- source: Metabase's pivot queries group by a constant "pivot-grouping" column, ABS(n) (issue 33)
-- identifiers: the demo's people.sex
-- expect: answered
SELECT "public"."people"."sex" AS "sex", ABS(2) AS "pivot-grouping", AVG("public"."people"."age") AS "avg" FROM "public"."people" GROUP BY "public"."people"."sex", ABS(2) ORDER BY "public"."people"."sex" ASC, ABS(2) ASC
