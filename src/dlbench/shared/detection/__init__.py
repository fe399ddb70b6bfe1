"""Framework-independent numpy pieces of the Faster R-CNN detector (frcnn-voc): box geometry, the
reference NMS, the RPN's and the RoI head's training targets, and VOC mAP.

Worker side (Python 3.8, numpy >= 1.17, standard library and numpy only): every framework's adapter
computes its targets and scores its detections with these same functions, so the frameworks differ
only where they must, in the network itself. Boxes are (N, 4) arrays of x1, y1, x2, y2 in continuous
image coordinates (see `boxes`).
"""
