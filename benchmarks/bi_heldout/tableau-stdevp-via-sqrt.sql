-- tool: Tableau, calculated field SQRT(VARP([Age])) by Region
-- chart: table
-- keys: 1
-- why: a square root over a released VAR_POP
-- expect: answered
SELECT "people"."region" AS "region", SQRT(VAR_POP(CAST("people"."age" AS DOUBLE PRECISION))) AS "usr:Calculation_1:ok" FROM "public"."people" "people" GROUP BY 1
