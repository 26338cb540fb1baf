-- tool: Power BI, DirectQuery: matrix, Average of income by region and sex
-- chart: matrix
-- keys: 1,2
-- why: two keys, AVG, nested form
-- expect: answered
select "_"."region", "_"."sex", "_"."a0"
from 
(
    select "rows"."region" as "region",
        "rows"."sex" as "sex",
        avg("rows"."income") as "a0"
    from 
    (
        select "_"."region", "_"."sex", "_"."income"
        from "public"."people" "_"
    ) "rows"
    group by "region",
        "sex"
) "_"
where not "_"."a0" is null
limit 1000001
