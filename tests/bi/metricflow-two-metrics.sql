-- tool: dbt MetricFlow (PostgreSQL), two simple metrics without dimensions (the rendering of
--   test_multiple_metrics_no_dimensions: one subquery per semantic model, CROSS JOINed)
-- source: dbt-labs/metricflow snapshot SQL (issue 33)
-- identifiers: the demo's visits.cost and people (no time constraint)
-- expect: answered
-- Combine Aggregated Outputs
SELECT
  MAX(subq_23.visit_cost) AS visit_cost
  , MAX(subq_30.people) AS people
FROM (
  -- Read Elements From Semantic Model 'visits_source'
  -- Pass Only Elements: ['__visit_cost']
  -- Aggregate Inputs for Simple Metrics
  -- Compute Metrics via Expressions
  SELECT
    SUM(cost) AS visit_cost
  FROM public.visits visits_source_src_28000
) subq_23
CROSS JOIN (
  -- Read Elements From Semantic Model 'people_source'
  -- Pass Only Elements: ['__people']
  -- Aggregate Inputs for Simple Metrics
  -- Compute Metrics via Expressions
  SELECT
    SUM(1) AS people
  FROM public.people people_source_src_28001
  WHERE age >= 18
) subq_30
