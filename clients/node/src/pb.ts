/** The generated protobuf types and service stubs of jobwire.v1 (ts-proto; see buf.gen.yaml). */
export * from "./gen/jobwire/v1/job.js";
export * from "./gen/jobwire/v1/job_service.js";
export * from "./gen/jobwire/v1/worker_service.js";
export * from "./gen/jobwire/v1/dead_letter_service.js";
export * from "./gen/jobwire/v1/queue_service.js";
export * from "./gen/jobwire/v1/group_service.js";
