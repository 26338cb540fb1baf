-- tool: Ibis, ibis.to_sql(people.group_by("region").aggregate(share=(_.age >= 65).mean()), dialect="postgres")
-- source: Ibis compiles the mean of a boolean to AVG(CAST(cond AS INT)) (issue 33)
-- identifiers: the demo's people
-- expect: answered
SELECT
  "t0"."region",
  AVG(CAST("t0"."age" >= 65 AS INT)) AS "share"
FROM "people" AS "t0"
GROUP BY
  1
