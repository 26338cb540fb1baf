-- tool: Tableau, STDEVP([Income]) by Sex
-- chart: table
-- keys: 1
-- why: STDEVP compiled to STDDEV_POP over a DOUBLE PRECISION cast
-- expect: answered
SELECT "people"."sex" AS "sex", STDDEV_POP(CAST("people"."income" AS DOUBLE PRECISION)) AS "stp:income:ok" FROM "public"."people" "people" GROUP BY 1
