-- tool: dbplyr, filter(age >= 18) |> group_by(region) |> summarise(mean(income), median(income))
-- chart: data frame
-- keys: 1
-- why: dbplyr's numeric literal 18.0 and PERCENTILE_CONT for median()
-- expect: answered
SELECT
  "region",
  AVG("income") AS "mean_income",
  PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY "income") AS "median_income"
FROM "people"
WHERE ("age" >= 18.0)
GROUP BY "region"
