-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of people.mutate(band=_.age.bucket([0, 30, 45, 65, 120], close_extreme=True))
-- chart: data frame
-- keys: 1
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  "t1"."band",
  COUNT(*) AS "n"
FROM (
  SELECT
    "t0"."person_id",
    "t0"."age",
    "t0"."income",
    "t0"."region",
    "t0"."sex",
    CASE
      WHEN (
        0 <= "t0"."age"
      ) AND (
        "t0"."age" < 30
      )
      THEN 0
      WHEN (
        30 <= "t0"."age"
      ) AND (
        "t0"."age" < 45
      )
      THEN 1
      WHEN (
        45 <= "t0"."age"
      ) AND (
        "t0"."age" < 65
      )
      THEN 2
      WHEN (
        65 <= "t0"."age"
      ) AND (
        "t0"."age" <= 120
      )
      THEN 3
      ELSE NULL
    END AS "band"
  FROM "people" AS "t0"
) AS "t1"
GROUP BY
  1
