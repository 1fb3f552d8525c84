//! Choosing where a program's processes should run, rather than predicting a placement a
//! user wrote down.
//!
//! [`work_rate`] is the model of Shao, Berman and Wolski for master/worker programs on
//! heterogeneous hosts and networks ("Master/Slave Computing on the Grid", HCW 2000): every
//! host can work for a master at some rate of tasks per second, a master can serve tasks at
//! some rate, and every network a task's data crosses carries at most so many tasks per
//! second. The best master and its workers are a maximum flow. [`master_worker`] recognises
//! such a program in a trace and measures its per-task figures, and [`work_rate_placement`]
//! turns the model's answer into a placement to start the search from. [`on_demand`] scores
//! a placement of a master/worker program whose master hands tasks out on demand by dealing
//! them again, which the engine's replay of the traced deal cannot. [`search`] is for any
//! program: it scores candidate placements with the engine and improves the best;
//! [`hostfiles`] writes a placement as the files to run it with.

pub mod hostfiles;
pub mod master_worker;
pub mod on_demand;
pub mod search;
pub mod work_rate;
pub mod work_rate_placement;
