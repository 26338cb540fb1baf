-- tool: dbt MetricFlow, mf query --metrics visits --group-by metric_time__month
-- chart: metric query
-- keys: 1
-- why: MetricFlow's `1 AS measure` subquery summed outside
-- expect: answered
SELECT
  subq_2.metric_time__month
  , SUM(subq_2.visits) AS visits
FROM (
  SELECT
    DATE_TRUNC('month', visits_src_1.visited_at) AS metric_time__month
    , 1 AS visits
  FROM public.visits visits_src_1
) subq_2
GROUP BY
  subq_2.metric_time__month
