-- tool: dbt (dbt_utils.safe_divide in a model's select), a mean as a ratio of two aggregates
-- source: dbt_utils macros/sql/safe_divide.sql: ( numerator ) / nullif( ( denominator ), 0)
-- identifiers: the demo's people.region and income
-- expect: answered
select region, ( sum(income) ) / nullif( ( count(*) ), 0) as mean_income from people group by region
