/** One claimed row's delivery, as the pool schedules it. */
export interface DeliveryTask {
  /** Tasks of one lane run one after the other, in submission order (the rows of one saga instance). */
  readonly lane: string;
  /** The group whose limit the task's lane counts against (the row's table); one lane, one group. Default ''. */
  readonly group?: string;
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
  /** The group whose slots it holds. */
  readonly group: string;
}

/** Lanes in flight at once: one limit for every group, or a limit per group. */
export type PoolLimits = number | Readonly<Record<string, number>>;

/**
 * Runs deliveries with bounded concurrency, shared by every pass of one dispatcher, so a pass that waits on
 * a slow lane does not stop the next pass from claiming and delivering other rows. At most the group's limit of
 * lanes run at once in each group (timers and publishes have their own); a lane runs its tasks in order; an
 * isolated task runs alone, whatever its group.
 *
 * An isolated task waits for the lanes running when it was queued. Meanwhile other rows are still claimed
 * and started (one hung delivery must not stall the dispatcher until it times out); once those earlier
 * lanes ended, nothing new starts until the isolated task ran, so later lanes cannot starve it.
 */
export class DeliveryPool {
  private readonly lanes = new Map<string, DeliveryTask[]>();
  /** The lanes waiting for a slot, per group, in queueing order. */
  private readonly ready = new Map<string, string[]>();
  /** The group of each queued or running lane. */
  private readonly laneGroup = new Map<string, string>();
  /** Lanes running per group. */
  private readonly runningIn = new Map<string, number>();
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
   * @param limits lanes in flight at once, in each group.
   * @param onError reports what a task threw (tasks record their own failures; this is a last resort).
   */
  constructor(
    private readonly limits: PoolLimits,
    private readonly onError: (error: unknown) => void,
  ) {}

  private limit(group: string): number {
    return typeof this.limits === 'number' ? this.limits : (this.limits[group] ?? 1);
  }

  private readyIn(group: string): string[] {
    let lanes = this.ready.get(group);
    if (!lanes) {
      lanes = [];
      this.ready.set(group, lanes);
    }
    return lanes;
  }

  /** Whether a lane of `group` may start now (a slot of its group is free and no reservation holds them). */
  private canStart(group: string): boolean {
    return (this.runningIn.get(group) ?? 0) < this.limit(group) && this.reservation?.group !== group;
  }

  /** Deliveries running now. */
  get active(): number {
    return this.running;
  }

  /**
   * Whether a new claim could start at once: a slot is free and no claimed row waits for one. Rows waiting
   * behind a busy row of their own saga do not count: a slot would not help them.
   */
  hasRoom(): boolean {
    if (this.exclusive || this.reservation || this.drainingForIsolated()) return false;
    for (const lanes of this.ready.values()) if (lanes.length > 0) return false;
    const groups = typeof this.limits === 'number' ? [''] : Object.keys(this.limits);
    return groups.some((group) => (this.runningIn.get(group) ?? 0) < this.limit(group));
  }

  /**
   * Holds every slot of `group` free for a claim about to be made, if the group is idle (none of its lanes running
   * or queued, no isolated task queued or running): the claim's first lanes, up to the group's limit, then start at
   * once when {@link submit}ted with the reservation, so the claim may mark them started itself. Undefined when the
   * group is busy or the pool already reserved.
   */
  reserve(group = ''): Reservation | undefined {
    const busy = (this.runningIn.get(group) ?? 0) > 0 || this.readyIn(group).length > 0;
    if (this.reservation || this.exclusive || busy || this.isolated.length > 0) return undefined;
    this.reservation = { sequence: this.nextLane++, group };
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
   * `tasks` ahead of everything queued meanwhile: their first lanes, up to the group's limit, start before this returns.
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
      const group = task.group ?? '';
      this.lanes.set(task.lane, [task]);
      this.laneGroup.set(task.lane, group);
      this.laneSequence.set(task.lane, this.nextLane++);
      this.readyIn(group).push(task.lane);
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
      else {
        const lane = ahead.get(task.lane);
        if (lane) lane.push(task);
        else ahead.set(task.lane, [task]);
      }
    }
    for (const [key, lane] of ahead) {
      this.lanes.set(key, [...lane, ...(this.lanes.get(key) ?? [])]);
      this.laneGroup.set(key, lane[0]!.group ?? '');
      this.laneSequence.set(key, sequence);
    }
    // Each group's lanes of the reservation first, in claim order, then the rest of that group's queue.
    const byGroup = new Map<string, string[]>();
    for (const key of ahead.keys()) {
      const group = this.laneGroup.get(key)!;
      const keys = byGroup.get(group);
      if (keys) keys.push(key);
      else byGroup.set(group, [key]);
    }
    for (const [group, keys] of byGroup) {
      this.ready.set(group, [...keys, ...this.readyIn(group).filter((key) => !ahead.has(key))]);
    }
    this.isolated.unshift(...isolated);
    for (const task of behind) this.queue(task);
  }

  private pump(): void {
    for (const [group, ready] of this.ready) {
      while (!this.exclusive && ready.length > 0 && this.canStart(group) && !this.drainingForIsolated()) {
        const lane = ready.shift()!;
        this.running++;
        this.runningIn.set(group, (this.runningIn.get(group) ?? 0) + 1);
        void this.runLane(lane);
      }
    }
    if (!this.exclusive && !this.reservation && this.running === 0 && this.isolated.length > 0) {
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
    const group = this.laneGroup.get(key)!;
    this.lanes.delete(key);
    this.laneGroup.delete(key);
    this.laneSequence.delete(key);
    this.running--;
    this.runningIn.set(group, this.runningIn.get(group)! - 1);
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
