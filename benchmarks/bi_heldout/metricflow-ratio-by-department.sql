-- tool: dbt MetricFlow, two measures by visit__department (FULL OUTER JOIN on the dimension)
-- chart: metric query
-- keys: 1
-- why: two grouped releases joined on their public key with COALESCE
-- expect: answered
SELECT
  COALESCE(subq_3.visit__department, subq_6.visit__department) AS visit__department
  , MAX(subq_3.long_stays) AS long_stays
  , MAX(subq_6.visits) AS visits
FROM (
  SELECT department AS visit__department, SUM(CASE WHEN days > 7 THEN 1 ELSE 0 END) AS long_stays
  FROM public.visits
  GROUP BY department
) subq_3
FULL OUTER JOIN (
  SELECT department AS visit__department, COUNT(visit_id) AS visits
  FROM public.visits
  GROUP BY department
) subq_6
ON
  subq_3.visit__department = subq_6.visit__department
GROUP BY
  COALESCE(subq_3.visit__department, subq_6.visit__department)
