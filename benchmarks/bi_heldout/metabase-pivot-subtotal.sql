-- tool: Metabase, pivot table: the subtotal query of a Region x Sex pivot
-- chart: pivot table
-- keys: 1,2
-- why: the pivot's per-row-subtotal query, with its constant "pivot-grouping" column
-- expect: answered
SELECT "public"."people"."region" AS "region", ABS(1) AS "pivot-grouping", COUNT(*) AS "count" FROM "public"."people" GROUP BY "public"."people"."region", ABS(1) ORDER BY "public"."people"."region" ASC, ABS(1) ASC
