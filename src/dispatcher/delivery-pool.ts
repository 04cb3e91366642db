/** One claimed row's delivery, as the pool schedules it. */
export interface DeliveryTask {
  /** Tasks of one lane run one after the other, in submission order (the rows of one saga instance). */
  readonly lane: string;
  /**
   * Run with no other delivery in flight in this process, and nothing started while it runs: for a row whose
   * last delivery died with its process, so that if it kills this one too, no other delivery is lost with it.
   */
  readonly isolated: boolean;
  /** Delivers the row (or gives it back, when the dispatcher is stopping); handles its own failures. */
  run(): Promise<void>;
  /** Called once the task ran. */
  settle(): void;
}

/**
 * Runs deliveries with bounded concurrency, shared by every pass of one dispatcher, so a pass that waits on
 * a slow lane does not stop the next pass from claiming and delivering other rows. At most `concurrency`
 * lanes run at once; a lane runs its tasks in order; an isolated task runs alone.
 *
 * An isolated task waits for the lanes running when it was queued. Meanwhile other rows are still claimed
 * and started (one hung delivery must not stall the dispatcher until it times out); once those earlier
 * lanes ended, nothing new starts until the isolated task ran, so later lanes cannot starve it.
 */
export class DeliveryPool {
  private readonly lanes = new Map<string, DeliveryTask[]>();
  private readonly ready: string[] = [];
  /** Isolated tasks, each with the sequence number of the first lane it does not wait for. */
  private readonly isolated: { task: DeliveryTask; after: number }[] = [];
  /** Sequence number of each queued or running lane, in queueing order. */
  private readonly laneSequence = new Map<string, number>();
  private nextLane = 0;
  private running = 0;
  private exclusive = false;
  private watchers: (() => void)[] = [];

  /**
   * @param concurrency lanes in flight at once.
   * @param onError reports what a task threw (tasks record their own failures; this is a last resort).
   */
  constructor(
    private readonly concurrency: number,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Deliveries running now. */
  get active(): number {
    return this.running;
  }

  /**
   * Whether a new claim could start at once: a slot is free and no claimed row waits for one. Rows waiting
   * behind a busy row of their own saga do not count: a slot would not help them.
   */
  hasRoom(): boolean {
    return !this.exclusive && this.running < this.concurrency && this.ready.length === 0 && !this.drainingForIsolated();
  }

  /** Whether an isolated task waits only for lanes queued after it: none of those starts until it ran. */
  private drainingForIsolated(): boolean {
    const first = this.isolated[0];
    if (!first) return false;
    for (const sequence of this.laneSequence.values()) if (sequence < first.after) return false;
    return true;
  }

  /** Resolves once {@link hasRoom} holds, or `signal` aborts. */
  whenRoom(signal: AbortSignal): Promise<void> {
    return new Promise<void>((resolve) => {
      const done = () => {
        signal.removeEventListener('abort', done);
        this.watchers = this.watchers.filter((w) => w !== check);
        resolve();
      };
      const check = () => {
        if (!signal.aborted && !this.hasRoom()) return;
        done();
      };
      if (signal.aborted || this.hasRoom()) return resolve();
      signal.addEventListener('abort', done, { once: true });
      this.watchers.push(check);
    });
  }

  /** Queues `tasks`; resolves when every one of them ran. */
  submit(tasks: readonly DeliveryTask[]): Promise<void> {
    const settled = tasks.map(
      (task) =>
        new Promise<void>((resolve) => {
          const tracked: DeliveryTask = {
            ...task,
            settle: () => {
              task.settle();
              resolve();
            },
          };
          if (task.isolated) {
            this.isolated.push({ task: tracked, after: this.nextLane });
            return;
          }
          const lane = this.lanes.get(task.lane);
          if (lane) lane.push(tracked);
          else {
            this.lanes.set(task.lane, [tracked]);
            this.laneSequence.set(task.lane, this.nextLane++);
            this.ready.push(task.lane);
          }
        }),
    );
    this.pump();
    return Promise.all(settled).then(() => undefined);
  }

  private pump(): void {
    while (!this.exclusive && this.running < this.concurrency && this.ready.length > 0 && !this.drainingForIsolated()) {
      const lane = this.ready.shift()!;
      this.running++;
      void this.runLane(lane);
    }
    if (!this.exclusive && this.running === 0 && this.isolated.length > 0) {
      const { task } = this.isolated.shift()!;
      this.exclusive = true;
      this.running++;
      void this.execute(task).then(() => {
        this.exclusive = false;
        this.running--;
        this.pump();
      });
    }
    for (const watcher of [...this.watchers]) watcher();
  }

  private async runLane(key: string): Promise<void> {
    const queue = this.lanes.get(key)!;
    for (let task = queue.shift(); task; task = queue.shift()) await this.execute(task);
    // No await between the empty shift() and this delete: a task submitted meanwhile would be lost.
    this.lanes.delete(key);
    this.laneSequence.delete(key);
    this.running--;
    this.pump();
  }

  private async execute(task: DeliveryTask): Promise<void> {
    try {
      await task.run();
    } catch (error) {
      this.onError(error);
    } finally {
      task.settle();
    }
  }
}
