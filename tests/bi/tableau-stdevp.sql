-- tool: Tableau-style SQL: STDEVP of a measure by a dimension, written as the square root of
--   the population variance
-- source: issue 33 ("SQRT (Tableau's STDEVP)")
-- identifiers: the demo's people.region and age
-- expect: answered
SELECT "people"."region" AS "region", SQRT(VAR_POP("people"."age")) AS "TEMP(Calculation_1)(2091203839)(0)" FROM "public"."people" "people" GROUP BY 1
