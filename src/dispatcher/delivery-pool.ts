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
 * Every slot of an idle pool held free for one claim in flight: nothing starts until that claim's tasks are
 * submitted with it (or it is released), and then they start ahead of whatever was queued meanwhile.
 */
export interface Reservation {
  /** The lane sequence number its tasks' lanes take: lanes and isolated tasks queued meanwhile come after. */
  readonly sequence: number;
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
  private ready: string[] = [];
  /** Isolated tasks, each with the sequence number of the first lane it does not wait for. */
  private readonly isolated: { task: DeliveryTask; after: number }[] = [];
  /** Sequence number of each queued or running lane, in queueing order. */
  private readonly laneSequence = new Map<string, number>();
  private nextLane = 0;
  private running = 0;
  private exclusive = false;
  private reservation: Reservation | undefined;
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
    return (
      !this.exclusive && !this.reservation && this.running < this.concurrency && this.ready.length === 0 && !this.drainingForIsolated()
    );
  }

  /**
   * Holds every slot free for a claim about to be made, if the pool is idle (nothing running or queued):
   * the claim's first `concurrency` lanes then start at once when {@link submit}ted with the reservation,
   * so the claim may mark them started itself. Undefined when the pool is busy or already reserved.
   */
  reserve(): Reservation | undefined {
    if (this.reservation || this.exclusive || this.running > 0 || this.ready.length > 0 || this.isolated.length > 0) return undefined;
    this.reservation = { sequence: this.nextLane++ };
    return this.reservation;
  }

  /** Gives a reservation up without tasks (its claim failed); what was queued meanwhile may start. */
  release(reservation: Reservation): void {
    if (this.reservation !== reservation) return;
    this.reservation = undefined;
    this.pump();
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

  /**
   * Queues `tasks`; resolves when every one of them ran. With the pool's `reservation`, ends it and queues
   * `tasks` ahead of everything queued meanwhile: their first `concurrency` lanes start before this returns.
   */
  submit(tasks: readonly DeliveryTask[], reservation?: Reservation): Promise<void> {
    const reserved = reservation !== undefined && reservation === this.reservation;
    if (reserved) this.reservation = undefined;
    const settled: Promise<void>[] = [];
    const tracked = tasks.map((task) => {
      let resolve!: () => void;
      settled.push(
        new Promise<void>((r) => {
          resolve = r;
        }),
      );
      return {
        ...task,
        settle: () => {
          task.settle();
          resolve();
        },
      };
    });
    if (reserved) this.queueAhead(tracked, reservation.sequence);
    else for (const task of tracked) this.queue(task);
    this.pump();
    return Promise.all(settled).then(() => undefined);
  }

  private queue(task: DeliveryTask): void {
    if (task.isolated) {
      this.isolated.push({ task, after: this.nextLane });
      return;
    }
    const lane = this.lanes.get(task.lane);
    if (lane) lane.push(task);
    else {
      this.lanes.set(task.lane, [task]);
      this.laneSequence.set(task.lane, this.nextLane++);
      this.ready.push(task.lane);
    }
  }

  /**
   * Queues a reservation's tasks before everything queued while it was held (nothing ran meanwhile): their
   * lanes first in `ready`, each ahead of a same-saga task queued meanwhile, under the reservation's
   * sequence number, so isolated tasks queued meanwhile wait for them; their own isolated tasks first too.
   */
  private queueAhead(tasks: readonly DeliveryTask[], sequence: number): void {
    const ahead = new Map<string, DeliveryTask[]>();
    const isolated: { task: DeliveryTask; after: number }[] = [];
    // A saga whose row is delivered alone keeps its order: its later rows queue behind that row, not ahead
    // (the claim marked none of them started).
    const isolatedLanes = new Set(tasks.filter((task) => task.isolated).map((task) => task.lane));
    const behind: DeliveryTask[] = [];
    for (const task of tasks) {
      if (task.isolated) isolated.push({ task, after: sequence + 1 });
      else if (isolatedLanes.has(task.lane)) behind.push(task);
      else ahead.set(task.lane, [...(ahead.get(task.lane) ?? []), task]);
    }
    for (const [key, lane] of ahead) {
      this.lanes.set(key, [...lane, ...(this.lanes.get(key) ?? [])]);
      this.laneSequence.set(key, sequence);
    }
    this.ready = [...ahead.keys(), ...this.ready.filter((key) => !ahead.has(key))];
    this.isolated.unshift(...isolated);
    for (const task of behind) this.queue(task);
  }

  private pump(): void {
    if (this.reservation) return;
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
