-- tool: dbplyr (R), summarise(r = cor(cost, days), c = cov(cost, days)) over a lazy table:
--   cor() and cov() are translated as CORR and COVAR_SAMP
-- source: issue 33; dbplyr's aggregate translations (sql_aggregate_2)
-- identifiers: the demo's visits.cost and days
-- expect: answered
SELECT CORR("cost", "days") AS "r", COVAR_SAMP("cost", "days") AS "c"
FROM "visits"
