-- tool: dbt MetricFlow, --where "{{ Dimension('visit__department') }} = 'oncology'" by metric_time__year
-- chart: metric query
-- keys: 1
-- why: a filter on a renamed dimension outside the source subquery
-- expect: answered
SELECT
  subq_1.metric_time__year
  , SUM(subq_1.total_cost) AS total_cost
FROM (
  SELECT
    DATE_TRUNC('year', visited_at) AS metric_time__year
    , department AS visit__department
    , cost AS total_cost
  FROM public.visits
) subq_1
WHERE subq_1.visit__department = 'oncology'
GROUP BY
  subq_1.metric_time__year
