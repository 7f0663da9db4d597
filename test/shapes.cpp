// shapes.cpp - C++ program for utrace: demangled names of methods, virtual
// calls, class and function templates, nested namespaces, operators.
//
// Usage: shapes [N]     (N shapes, 1..64, default 10)
//
// Builds N shapes (shape i is a Circle, Rect or Triangle for i % 3 == 0, 1,
// 2), held as std::unique_ptr<geometry::Shape> so area() and name() are
// virtual calls, then prints each shape and one "calls <count> <name>" line
// per counted function, names exactly as c++filt prints them (see
// test/README.md).
//
// Expected counts, with C = ceil(N/3), R = ceil((N-1)/3), T = ceil((N-2)/3)
// shapes of each kind (N = 10: C 4, R 3, T 3):
//   main 1
//   geometry::Circle::area() const        C     geometry::Circle::name() const   C
//   geometry::Rect::area() const          R     geometry::Rect::name() const     R
//   geometry::Triangle::area() const      T     geometry::Triangle::name() const T
//   geometry::operator+(geometry::Vec2 const&, geometry::Vec2 const&)   N
//   geometry::util::round_to(double, double)                           N + 1
//   Stack<int>::push(int) N        Stack<int>::pop() N        Stack<int>::empty() const N + 1
//   Stack<double>::push(double) N  Stack<double>::pop() N     Stack<double>::empty() const N + 1
//   int largest<int>(int, int) N   double largest<double>(double, double) N
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#define COUNTED __attribute__((noipa))

namespace counts {
std::atomic<unsigned long> main_, circle_area, circle_name, rect_area,
    rect_name, triangle_area, triangle_name, vec_add, round_to, istack_push,
    istack_pop, istack_empty, dstack_push, dstack_pop, dstack_empty,
    largest_int, largest_double;

inline void bump(std::atomic<unsigned long> &c)
{
    c.fetch_add(1, std::memory_order_relaxed);
}
} // namespace counts

namespace geometry {

struct Vec2 {
    double x, y;
};

COUNTED Vec2 operator+(const Vec2 &a, const Vec2 &b)
{
    counts::bump(counts::vec_add);
    return Vec2{a.x + b.x, a.y + b.y};
}

class Shape {
public:
    explicit Shape(Vec2 position) : position_(position) {}
    virtual ~Shape() = default;
    virtual double area() const = 0;
    virtual const char *name() const = 0;
    Vec2 position() const { return position_; }

private:
    Vec2 position_;
};

class Circle : public Shape {
public:
    Circle(Vec2 p, double radius) : Shape(p), radius_(radius) {}
    COUNTED double area() const override;
    COUNTED const char *name() const override;

private:
    double radius_;
};

class Rect : public Shape {
public:
    Rect(Vec2 p, double w, double h) : Shape(p), w_(w), h_(h) {}
    COUNTED double area() const override;
    COUNTED const char *name() const override;

private:
    double w_, h_;
};

class Triangle : public Shape {
public:
    Triangle(Vec2 p, double base, double height)
        : Shape(p), base_(base), height_(height) {}
    COUNTED double area() const override;
    COUNTED const char *name() const override;

private:
    double base_, height_;
};

double Circle::area() const
{
    counts::bump(counts::circle_area);
    return 3.14159265358979 * radius_ * radius_;
}

const char *Circle::name() const
{
    counts::bump(counts::circle_name);
    return "circle";
}

double Rect::area() const
{
    counts::bump(counts::rect_area);
    return w_ * h_;
}

const char *Rect::name() const
{
    counts::bump(counts::rect_name);
    return "rect";
}

double Triangle::area() const
{
    counts::bump(counts::triangle_area);
    return 0.5 * base_ * height_;
}

const char *Triangle::name() const
{
    counts::bump(counts::triangle_name);
    return "triangle";
}

namespace util {

// Rounds v to the nearest multiple of step (step > 0).
COUNTED double round_to(double v, double step)
{
    counts::bump(counts::round_to);
    long k = (long)(v / step + (v < 0 ? -0.5 : 0.5));
    return (double)k * step;
}

} // namespace util
} // namespace geometry

// A fixed-capacity stack: no allocation, so its methods cannot throw.
template <typename T> class Stack {
public:
    COUNTED void push(T value);
    COUNTED T pop();
    COUNTED bool empty() const;

private:
    T items_[64];
    int size_ = 0;
};

// Which counters a template instantiated for T bumps.
template <typename T> struct Counters;
template <> struct Counters<int> {
    static std::atomic<unsigned long> &push() { return counts::istack_push; }
    static std::atomic<unsigned long> &pop() { return counts::istack_pop; }
    static std::atomic<unsigned long> &empty() { return counts::istack_empty; }
    static std::atomic<unsigned long> &largest() { return counts::largest_int; }
};
template <> struct Counters<double> {
    static std::atomic<unsigned long> &push() { return counts::dstack_push; }
    static std::atomic<unsigned long> &pop() { return counts::dstack_pop; }
    static std::atomic<unsigned long> &empty() { return counts::dstack_empty; }
    static std::atomic<unsigned long> &largest() { return counts::largest_double; }
};

template <typename T> void Stack<T>::push(T value)
{
    counts::bump(Counters<T>::push());
    if (size_ < 64)
        items_[size_++] = value;
}

template <typename T> T Stack<T>::pop()
{
    counts::bump(Counters<T>::pop());
    return size_ > 0 ? items_[--size_] : T();
}

template <typename T> bool Stack<T>::empty() const
{
    counts::bump(Counters<T>::empty());
    return size_ == 0;
}

// A function template, instantiated (implicitly) for int and double.
template <typename T> COUNTED T largest(T a, T b)
{
    counts::bump(Counters<T>::largest());
    return a < b ? b : a;
}

static std::unique_ptr<geometry::Shape> make_shape(int i)
{
    geometry::Vec2 p{(double)i, (double)(i * i % 7)};
    switch (i % 3) {
    case 0:
        return std::make_unique<geometry::Circle>(p, 1.0 + 0.5 * i);
    case 1:
        return std::make_unique<geometry::Rect>(p, 2.0 + i, 1.5);
    default:
        return std::make_unique<geometry::Triangle>(p, 3.0, 1.0 + i);
    }
}

// Not counted: it owns the vector, so it has exception cleanup code.
static void run(int n)
{
    std::vector<std::unique_ptr<geometry::Shape>> shapes;
    shapes.reserve((size_t)n);
    for (int i = 0; i < n; i++)
        shapes.push_back(make_shape(i));

    Stack<double> areas;
    Stack<int> ids;
    geometry::Vec2 centre{0.0, 0.0};
    double total = 0.0, best = 0.0;
    for (int i = 0; i < n; i++) {
        const geometry::Shape &s = *shapes[(size_t)i];
        double a = geometry::util::round_to(s.area(), 0.001);
        std::printf("shape %d: %s area %.3f\n", i, s.name(), a);
        total += a;
        best = largest<double>(best, a);
        centre = centre + s.position();
        areas.push(a);
        ids.push(i);
    }

    double check = 0.0;
    while (!areas.empty())
        check += areas.pop();
    int max_id = -1;
    while (!ids.empty())
        max_id = largest<int>(max_id, ids.pop());

    std::printf("total area %.3f, largest %.3f, popped %.3f, max id %d\n",
                geometry::util::round_to(total, 0.001), best, check, max_id);
    std::printf("centre sum (%.1f, %.1f)\n", centre.x, centre.y);
}

static void print_count(const std::atomic<unsigned long> &c, const char *name)
{
    std::printf("calls %lu %s\n", c.load(std::memory_order_relaxed), name);
}

int main(int argc, char **argv)
{
    counts::bump(counts::main_);
    int n = 10;
    if (argc > 1) {
        char *end;
        long v = std::strtol(argv[1], &end, 10);
        if (*end != '\0' || v < 1 || v > 64) {
            std::fprintf(stderr, "usage: shapes [N]   (1..64)\n");
            return 2;
        }
        n = (int)v;
    }

    run(n);

    print_count(counts::main_, "main");
    print_count(counts::circle_area, "geometry::Circle::area() const");
    print_count(counts::circle_name, "geometry::Circle::name() const");
    print_count(counts::rect_area, "geometry::Rect::area() const");
    print_count(counts::rect_name, "geometry::Rect::name() const");
    print_count(counts::triangle_area, "geometry::Triangle::area() const");
    print_count(counts::triangle_name, "geometry::Triangle::name() const");
    print_count(counts::vec_add,
                "geometry::operator+(geometry::Vec2 const&, geometry::Vec2 const&)");
    print_count(counts::round_to, "geometry::util::round_to(double, double)");
    print_count(counts::istack_push, "Stack<int>::push(int)");
    print_count(counts::istack_pop, "Stack<int>::pop()");
    print_count(counts::istack_empty, "Stack<int>::empty() const");
    print_count(counts::dstack_push, "Stack<double>::push(double)");
    print_count(counts::dstack_pop, "Stack<double>::pop()");
    print_count(counts::dstack_empty, "Stack<double>::empty() const");
    print_count(counts::largest_int, "int largest<int>(int, int)");
    print_count(counts::largest_double, "double largest<double>(double, double)");
    return 0;
}
