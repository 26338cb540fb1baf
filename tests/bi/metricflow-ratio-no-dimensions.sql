-- tool: dbt MetricFlow (PostgreSQL), a ratio metric queried without dimensions: each metric's
--   one-row subquery CROSS JOINed, MAX() of each (tests_metricflow/snapshots, the
--   conversion-rate and 'Combine Aggregated Outputs' renderings)
-- source: dbt-labs/metricflow snapshot SQL (issue 33, 'a CROSS JOIN of two one-row releases')
-- identifiers: the demo's visits (department, days); schema public
-- expect: answered
-- Combine Aggregated Outputs
-- Compute Metrics via Expressions
SELECT
  CAST(MAX(subq_34.stays) AS DOUBLE PRECISION) / CAST(NULLIF(MAX(subq_23.visits), 0) AS DOUBLE PRECISION) AS stay_per_visit
FROM (
  -- Constrain Output with WHERE
  -- Pass Only Elements: ['visits',]
  -- Aggregate Measures
  SELECT
    SUM(visits) AS visits
  FROM (
    -- Read Elements From Semantic Model 'visits_source'
    -- Metric Time Dimension 'visited_at'
    -- Pass Only Elements: ['visits', 'metric_time__day']
    SELECT
      DATE_TRUNC('day', visited_at) AS metric_time__day
      , department AS visit__department
      , 1 AS visits
    FROM public.visits visits_source_src_28000
  ) subq_20
  WHERE visit__department = 'oncology'
) subq_23
CROSS JOIN (
  -- Pass Only Elements: ['stays',]
  -- Aggregate Measures
  SELECT
    SUM(days) AS stays
  FROM (
    SELECT
      DATE_TRUNC('day', visited_at) AS metric_time__day
      , days
    FROM public.visits visits_source_src_28000
  ) subq_31
) subq_34
