"""The core paper's study (Broscheit, Do, Gaspers, ACL 2022: distributionally robust finetuning
under SeqDrift covariate drift) as this project reproduces it: the plan (`plan`), the paper's
numbers (`paper_results`), the records as the report reads them (`records`), the report's tables,
figures and text (`tables`, `figures`, `report`)."""
