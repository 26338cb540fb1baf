-- tool: dbplyr, filter(department == 'pediatrics') |> summarise(max(days), min(cost))
-- chart: data frame
-- why: MAX and MIN under an equality filter
-- expect: answered
SELECT MAX("days") AS "max_days", MIN("cost") AS "min_cost"
FROM "visits"
WHERE ("department" = 'pediatrics')
