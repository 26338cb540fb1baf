-- tool: dbt MetricFlow, ratio metric cost_per_visit with no group by
-- chart: metric query
-- why: a CROSS JOIN of two one-row releases and a NULLIF ratio
-- expect: answered
SELECT
  CAST(subq_7.total_cost AS DOUBLE PRECISION) / CAST(NULLIF(subq_7.visit_count, 0) AS DOUBLE PRECISION) AS cost_per_visit
FROM (
  SELECT
    MAX(subq_3.total_cost) AS total_cost
    , MAX(subq_6.visit_count) AS visit_count
  FROM (
    SELECT SUM(visits_src_1.cost) AS total_cost FROM public.visits visits_src_1
  ) subq_3
  CROSS JOIN (
    SELECT COUNT(visits_src_2.visit_id) AS visit_count FROM public.visits visits_src_2
  ) subq_6
) subq_7
